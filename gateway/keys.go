package gateway

import (
	"bufio"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
)

// KeysEnv is the environment variable that can hold client keys inline, in
// the file format with entries separated by newlines or commas.
const KeysEnv = "RATEKEEPER_GATEWAY_KEYS"

// HeaderKey is the request header a client sends its gateway key in. On
// the proxy routes without pass-through, the provider's own auth header
// (Authorization: Bearer KEY for GitHub) may carry the key instead, so a
// client library configured with the key as its "token" works unchanged;
// on the dashboard and /status, Authorization: Bearer KEY or HTTP Basic
// with the key as password (what a browser prompts for) work too.
const HeaderKey = "X-Ratekeeper-Key"

// MinKeyLength is the shortest key accepted.
const MinKeyLength = 16

// Keys are the clients allowed to use the gateway, each with a name (for
// logs and metrics) and a secret key. Only SHA-256 digests of the keys are
// kept. A nil or empty Keys authenticates nobody, and the gateway then
// requires no key (see Options.Keys).
type Keys struct {
	entries []keyEntry
}

type keyEntry struct {
	name   string
	digest [sha256.Size]byte
}

// Len returns how many keys there are.
func (k *Keys) Len() int {
	if k == nil {
		return 0
	}
	return len(k.entries)
}

// Names returns the client names in file order.
func (k *Keys) Names() []string {
	if k == nil {
		return nil
	}
	out := make([]string, len(k.entries))
	for i, e := range k.entries {
		out[i] = e.name
	}
	return out
}

// Lookup returns the name of the client whose key is key. It compares
// digests in constant time and looks at every entry, so the time taken
// tells nothing about which keys exist.
func (k *Keys) Lookup(key string) (name string, ok bool) {
	if k == nil || key == "" {
		return "", false
	}
	d := sha256.Sum256([]byte(key))
	for _, e := range k.entries {
		if subtle.ConstantTimeCompare(d[:], e.digest[:]) == 1 {
			name, ok = e.name, true
		}
	}
	return name, ok
}

// ParseKeys reads client keys in this format, one client per line:
//
//	# comments and blank lines are ignored
//	NAME KEY
//
// NAME is 1 to 64 letters, digits, '.', '_' or '-', unique; KEY is at least
// MinKeyLength characters among letters, digits and "-._~+/=" (hex, base64
// and base64url keys all fit; `openssl rand -hex 24` makes a good one),
// unique. source names the input in errors ("keys.txt"). Every error names
// the line and says what is wrong; none repeats a key.
func ParseKeys(source string, r io.Reader) (*Keys, error) {
	var lines []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), 64<<10)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("client keys %s: line %d: %w", source, len(lines)+1, err)
	}
	return parseEntries(source, "line", lines)
}

// LoadKeys reads the client keys file at path (see ParseKeys).
func LoadKeys(path string) (*Keys, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("client keys: %w", err)
	}
	defer f.Close()
	return ParseKeys(path, f)
}

// ParseKeysEnv reads keys from an environment variable's value: entries in
// the file format separated by newlines or commas. name is the variable's
// name, for errors.
func ParseKeysEnv(name, value string) (*Keys, error) {
	entries := strings.FieldsFunc(value, func(r rune) bool { return r == ',' || r == '\n' || r == '\r' })
	return parseEntries(name, "entry", entries)
}

// Merge returns the keys of k and o together, refusing a name or key that
// appears in both.
func (k *Keys) Merge(o *Keys) (*Keys, error) {
	out := &Keys{}
	for _, src := range []*Keys{k, o} {
		if src == nil {
			continue
		}
		for _, e := range src.entries {
			for _, have := range out.entries {
				if have.name == e.name {
					return nil, fmt.Errorf("client keys: client %q is defined twice (in the file and the environment); keep one", e.name)
				}
				if have.digest == e.digest {
					return nil, fmt.Errorf("client keys: clients %q and %q have the same key; give each client its own", have.name, e.name)
				}
			}
			out.entries = append(out.entries, e)
		}
	}
	return out, nil
}

func parseEntries(source, unit string, lines []string) (*Keys, error) {
	k := &Keys{}
	where := map[string]int{}
	digests := map[[sha256.Size]byte]int{}
	for i, line := range lines {
		n := i + 1
		fail := func(format string, args ...any) error {
			return fmt.Errorf("client keys %s: %s %d: %s", source, unit, n, fmt.Sprintf(format, args...))
		}
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 {
			return nil, fail("expected NAME KEY (two fields separated by spaces), found %d field(s)", len(fields))
		}
		name, key := fields[0], fields[1]
		if !validKeyName(name) {
			return nil, fail("client name %q may contain only letters, digits, '.', '_' and '-' (at most 64)", name)
		}
		if prev, dup := where[name]; dup {
			return nil, fail("client %q is already defined on %s %d; names must be unique", name, unit, prev)
		}
		if len(key) < MinKeyLength {
			return nil, fail("the key of %q is %d characters; use at least %d (e.g. the output of `openssl rand -hex 24`)", name, len(key), MinKeyLength)
		}
		if bad := badKeyChar(key); bad != 0 {
			return nil, fail("the key of %q contains a character outside letters, digits and \"-._~+/=\" (position %d)", name, bad)
		}
		d := sha256.Sum256([]byte(key))
		if prev, dup := digests[d]; dup {
			return nil, fail("the key of %q is the same as the key on %s %d; give each client its own key", name, unit, prev)
		}
		where[name], digests[d] = n, n
		k.entries = append(k.entries, keyEntry{name: name, digest: d})
	}
	if len(k.entries) == 0 {
		return nil, fmt.Errorf("client keys %s: no keys; write one line per client: NAME KEY", source)
	}
	return k, nil
}

func validKeyName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range []byte(s) {
		if !isAlnum(c) && c != '.' && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

// badKeyChar returns the 1-based position of the first character a key may
// not contain, or 0.
func badKeyChar(s string) int {
	for i, c := range []byte(s) {
		if !isAlnum(c) && !strings.ContainsRune("-._~+/=", rune(c)) {
			return i + 1
		}
	}
	return 0
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// errNoKey and errBadKey are the two ways client authentication fails.
var (
	errNoKey  = errors.New("this gateway requires a client key: send it in the " + HeaderKey + " header")
	errBadKey = errors.New("the client key is not valid: send one of the keys the gateway was given (--client-keys, " + KeysEnv + ") in the " + HeaderKey + " header")
)

// presentedKey finds the key a request presents: the X-Ratekeeper-Key
// header, else, when alsoAuth, the Authorization header's Bearer token or
// Basic password, or authHeader's value without authPrefix (a provider's
// own auth header, such as GitLab's PRIVATE-TOKEN).
func presentedKey(h http.Header, alsoAuth bool, authHeader, authPrefix string) string {
	if v := h.Get(HeaderKey); v != "" {
		return v
	}
	if !alsoAuth {
		return ""
	}
	if v := h.Get("Authorization"); v != "" {
		scheme, rest, _ := strings.Cut(v, " ")
		rest = strings.TrimSpace(rest)
		switch strings.ToLower(scheme) {
		case "bearer", "token":
			return rest
		case "basic":
			raw, err := base64.StdEncoding.DecodeString(rest)
			if err != nil {
				return ""
			}
			_, pass, _ := strings.Cut(string(raw), ":")
			return pass
		}
	}
	if authHeader != "" && !strings.EqualFold(authHeader, "Authorization") {
		v := h.Get(authHeader)
		if authPrefix != "" {
			v = strings.TrimSpace(strings.TrimPrefix(v, authPrefix+" "))
		}
		return v
	}
	return ""
}
