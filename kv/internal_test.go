package kv

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestPrefixEnd(t *testing.T) {
	for _, tc := range []struct {
		prefix, end string
		ok          bool
	}{
		{"", "", false},
		{"a", "b", true},
		{"a/", "a0", true},
		{"é", "ê", true},
		{"a\uD7FF", "a\uE000", true},
		{"a\U0010FFFF", "b", true},
		{"\U0010FFFF\U0010FFFF", "", false},
	} {
		end, ok := prefixEnd(tc.prefix)
		if end != tc.end || ok != tc.ok {
			t.Errorf("prefixEnd(%q) = %q, %v; want %q, %v", tc.prefix, end, ok, tc.end, tc.ok)
		}
		if ok && !utf8.ValidString(end) {
			t.Errorf("prefixEnd(%q) = %q is not valid UTF-8", tc.prefix, end)
		}
	}
	// Every key with the prefix sorts below the end, and the end itself
	// does not have the prefix.
	for _, prefix := range []string{"a", "a\u07FF", "z\uFFFF", "é\U0010FFFF"} {
		end, _ := prefixEnd(prefix)
		for _, suffix := range []string{"", "\x00", "\U0010FFFF\U0010FFFF", "zzz"} {
			if key := prefix + suffix; key >= end {
				t.Errorf("key %q >= prefixEnd(%q) = %q", key, prefix, end)
			}
		}
		if strings.HasPrefix(end, prefix) {
			t.Errorf("prefixEnd(%q) = %q has the prefix", prefix, end)
		}
	}
}

func TestMigrationsAreNumberedInOrder(t *testing.T) {
	if len(migrations) != SchemaVersion {
		t.Fatalf("%d migrations but SchemaVersion is %d", len(migrations), SchemaVersion)
	}
	for i, m := range migrations {
		if m.version != i+1 || len(m.sqlite) == 0 || len(m.postgres) == 0 {
			t.Errorf("migration %d has version %d and %d/%d statements; want version %d with SQL for both databases", i, m.version, len(m.sqlite), len(m.postgres), i+1)
		}
	}
}

func TestChecksumCoversKeyAndValue(t *testing.T) {
	base := checksum("k", []byte("v"))
	if checksum("k", []byte("v")) != base {
		t.Fatal("checksum is not deterministic")
	}
	for _, other := range []int64{checksum("k2", []byte("v")), checksum("k", []byte("w")), checksum("kv", nil), checksum("k", nil)} {
		if other == base {
			t.Errorf("checksum collision with %d", other)
		}
	}
}
