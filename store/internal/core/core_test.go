package core

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

func TestDollarNumbered(t *testing.T) {
	for q, want := range map[string]string{
		"SELECT 1":                          "SELECT 1",
		"WHERE key = ?":                     "WHERE key = $1",
		"VALUES (?, ?, nextval('c'), ?)":    "VALUES ($1, $2, nextval('c'), $3)",
		"key >= ? AND key < ? ORDER BY key": "key >= $1 AND key < $2 ORDER BY key",
	} {
		if got := dollarNumbered(q); got != want {
			t.Errorf("dollarNumbered(%q) = %q; want %q", q, got, want)
		}
	}
}

func TestChecksumCoversKeyAndValue(t *testing.T) {
	base := Checksum("k", []byte("v"))
	if Checksum("k", []byte("v")) != base {
		t.Fatal("checksum is not deterministic")
	}
	for _, other := range []int64{Checksum("k2", []byte("v")), Checksum("k", []byte("w")), Checksum("kv", nil), Checksum("k", nil)} {
		if other == base {
			t.Errorf("checksum collision with %d", other)
		}
	}
}
