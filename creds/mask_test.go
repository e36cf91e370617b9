package creds

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestMaskToken(t *testing.T) {
	tests := []struct{ token, want string }{
		{"tok-alice-1", "…-1"},        // 11 chars: a quarter is 2
		{"tok-alice-12345", "…345"},   // 15: 3
		{"tok-alice-123456", "…3456"}, // 16: 4
		{"tok-very-long-test-token-a1b2", "…a1b2"},
		{"short", "…"}, // below 8: nothing
		{"", "…"},
		{"ghp_test000000000000000000000000000a1b2", "ghp_…a1b2"},
		{"github_pat_test0000000000000000000000c3d4", "github_pat_…c3d4"},
		{"glpat-test00000000000e5f6", "glpat-…e5f6"},
		{"hf_testtesttesttesttesttestg7h8", "hf_…g7h8"},
		{"ghs_testtest", "ghs_…st"}, // secret part 8: 2
		{"ghp_", "…"},               // a bare prefix is not a prefix
		{"gho_abc", "gho_…"},
		{"tök-ünïcode-päss-wörd", "…wörd"}, // counted in characters, not bytes
	}
	for _, tt := range tests {
		if got := MaskToken(tt.token); got != tt.want {
			t.Errorf("MaskToken(%q) = %q, want %q", tt.token, got, tt.want)
		}
	}
	c := NewToken("github", 2, "ghp_test000000000000000000000000000a1b2", "GITHUB_TOKEN entry #2")
	if c.Masked() != "#2 ghp_…a1b2" {
		t.Errorf("Masked = %q", c.Masked())
	}
	if a := NewAnonymous("github", 1); a.Masked() != "#1 anonymous" {
		t.Errorf("anonymous Masked = %q", a.Masked())
	}
}

// longestCommonSubstring returns the length, in characters, of the longest
// string that occurs in both a and b.
func longestCommonSubstring(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	best := 0
	prev := make([]int, len(rb)+1)
	for i := 1; i <= len(ra); i++ {
		cur := make([]int, len(rb)+1)
		for j := 1; j <= len(rb); j++ {
			if ra[i-1] == rb[j-1] {
				cur[j] = prev[j-1] + 1
				best = max(best, cur[j])
			}
		}
		prev = cur
	}
	return best
}

// TestMaskNeverRevealsMoreThanAllowed checks, for many random tokens, that
// the masked form is index, known prefix, ellipsis and a tail of at most a
// quarter (and at most 4) of the secret part, and that no longer piece of
// the secret appears anywhere in it.
func TestMaskNeverRevealsMoreThanAllowed(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []rune("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.~äö")
	prefixes := append([]string{"", "", ""}, tokenPrefixes...)
	for i := range 5000 {
		prefix := prefixes[rng.IntN(len(prefixes))]
		n := rng.IntN(60)
		var b strings.Builder
		b.WriteString(prefix)
		for range n {
			b.WriteRune(alphabet[rng.IntN(len(alphabet))])
		}
		tok := b.String()
		c := NewToken("p", i+1, tok, "test")
		m := c.Masked()
		head := fmt.Sprintf("#%d ", i+1)
		if !strings.HasPrefix(m, head) {
			t.Fatalf("%q masked as %q: no index", tok, m)
		}
		shown := strings.TrimPrefix(m, head)
		p := TokenPrefix(tok)
		secretPart := tok[len(p):]
		if !strings.HasPrefix(shown, p+"…") {
			t.Fatalf("%q masked as %q: not prefix+ellipsis", tok, m)
		}
		tail := strings.TrimPrefix(shown, p+"…")
		allowed := RevealedChars(utf8.RuneCountInString(secretPart))
		if utf8.RuneCountInString(tail) > allowed || allowed > 4 || allowed*4 > utf8.RuneCountInString(secretPart) {
			t.Fatalf("%q masked as %q: tail %q longer than allowed %d", tok, m, tail, allowed)
		}
		if !strings.HasSuffix(secretPart, tail) {
			t.Fatalf("%q masked as %q: tail is not the token's end", tok, m)
		}
		// Nothing else of the secret shows, wherever it might hide.
		if lcs := longestCommonSubstring(strings.TrimPrefix(shown, p), secretPart); lcs > max(allowed, 1) {
			t.Fatalf("%q masked as %q shows %d characters of the secret, allowed %d", tok, m, lcs, allowed)
		}
	}
}

const leakToken = "tok-leak-check-do-not-print-7f3a9c"

// leaks reports whether s contains the token or any 8-character piece of it.
func leaks(s string) bool {
	for i := 0; i+8 <= len(leakToken); i++ {
		if strings.Contains(s, leakToken[i:i+8]) {
			return true
		}
	}
	return false
}

func TestFormattingNeverLeaks(t *testing.T) {
	c := NewToken("github", 3, leakToken, "GITHUB_TOKEN entry #3")
	c.SetOwner(ownerOf("octocat", "1"))
	type holder struct {
		C     *Credential
		V     Credential
		inner *Credential
		val   Credential
		List  []*Credential
		Map   map[string]*Credential
	}
	h := holder{C: c, V: *c, inner: c, val: *c, List: []*Credential{c}, Map: map[string]*Credential{"a": c}}
	var outs []string
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%T", "%p", "%60v", "%-60s"} {
		outs = append(outs,
			fmt.Sprintf(verb, c), fmt.Sprintf(verb, *c), fmt.Sprintf(verb, h), fmt.Sprintf(verb, &h),
			fmt.Sprintf(verb, []any{c, *c}))
	}
	outs = append(outs, fmt.Sprint(c, *c, h), fmt.Sprintln(c, h), c.String(), c.GoString(), fmt.Errorf("wrapped: %w", fmt.Errorf("%v", c)).Error())
	for _, v := range []any{c, *c, h, []*Credential{c}, map[string]Credential{"x": *c}} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, string(b))
	}
	var buf bytes.Buffer
	for _, handler := range []slog.Handler{slog.NewJSONHandler(&buf, nil), slog.NewTextHandler(&buf, nil)} {
		l := slog.New(handler)
		l.Info("using", "cred", c, "value", *c, "holder", h, slog.Any("any", c))
		l.Info("group", slog.Group("g", "cred", c))
	}
	outs = append(outs, buf.String())
	for _, o := range outs {
		if leaks(o) {
			t.Errorf("output reveals the token: %s", o)
		}
	}
	if !strings.Contains(buf.String(), "#3 …3a9c") || !strings.Contains(buf.String(), "octocat") {
		t.Errorf("slog output lacks the masked form or owner: %s", buf.String())
	}
	var decoded map[string]any
	b, _ := json.Marshal(c)
	if err := json.Unmarshal(b, &decoded); err != nil || decoded["masked"] != "#3 …3a9c" || decoded["kind"] != "token" || decoded["bucket_owner"] != "user:1" {
		t.Errorf("JSON = %s", b)
	}
}

func TestErrorsNeverLeak(t *testing.T) {
	for _, v := range []string{
		leakToken + ",",
		" " + leakToken,
		leakToken + "\n",
		"tok-a," + leakToken + " ,tok-b",
		"tok-leak-check do-not-print-7f3a9c",
		"tok-leak-check-\x01do-not-print-7f3a9c",
	} {
		_, err := ParseTokenList("GITHUB_TOKEN", v)
		if err == nil {
			t.Errorf("%q accepted", v)
			continue
		}
		if leaks(err.Error()) {
			t.Errorf("error reveals the token: %v", err)
		}
	}
}
