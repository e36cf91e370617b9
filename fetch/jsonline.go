package fetch

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"

	"github.com/ratekeeper/ratekeeper/transport"
)

// A line of the input that starts with { is a request in JSON (JSON
// Lines): {"url": …, "method": …, "headers": {…}, "body": …, "id": …}.

// JSONRequest is what a JSON line asks for beyond its URL.
type JSONRequest struct {
	// Method is upper case; empty means GET.
	Method string
	// Headers are sent as given.
	Headers map[string]string
	// Body is the body as the line gave it: a JSON string is sent as the
	// string it holds, any other value as JSON (application/json). Empty
	// (or null) means none.
	Body json.RawMessage
	// ID is the line's id, a JSON string or number, echoed in the output
	// and the request's key; nil when the line has none.
	ID json.RawMessage
	// Cost is the request's exact cost: a number, in the units of the
	// bucket that paces it (a language model's tokens), or an object of
	// each bucket's by name ({"input_tokens": 1200, "output_tokens":
	// 300}), sent to the client as the X-Ratekeeper-Cost header (removed
	// before the request leaves); nil leaves the estimates.
	Cost transport.Costs
}

// jsonLineShape is what a JSON line looks like, for error messages.
const jsonLineShape = `{"url": "https://…", "method": "POST", "headers": {"Name": "value"}, "body": {…} or "text", "id": "any key", "cost": 1200 or {"input_tokens": 1200, "output_tokens": 300}}`

var jsonLineFields = []string{"url", "method", "headers", "body", "id", "cost"}

// parseJSONLine reads one JSON line into e: its URL and request.
func parseJSONLine(text string, e *Entry) error {
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(strings.NewReader(text))
	if err := dec.Decode(&raw); err != nil {
		return fmt.Errorf("not a JSON object (%v); a JSON line is %s", err, jsonLineShape)
	}
	if dec.More() {
		return fmt.Errorf("more than one JSON value on the line; give one request a line, %s", jsonLineShape)
	}
	var unknown []string
	for k := range raw {
		if !containsString(jsonLineFields, k) {
			unknown = append(unknown, fmt.Sprintf("%q", k))
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return fmt.Errorf("unknown field %s; a JSON line has %s", strings.Join(unknown, ", "), strings.Join(jsonLineFields, ", "))
	}
	var r JSONRequest
	if v, ok := raw["url"]; !ok || isNull(v) {
		return fmt.Errorf(`no "url"; a JSON line is %s`, jsonLineShape)
	} else if err := json.Unmarshal(v, &e.URL); err != nil {
		return fmt.Errorf(`"url" is %s, want a string such as "https://api.github.com/graphql"`, shortJSON(v))
	}
	e.URL = strings.TrimSpace(e.URL)
	if v, ok := raw["method"]; ok && !isNull(v) {
		if err := json.Unmarshal(v, &r.Method); err != nil || !validMethod(r.Method) {
			return fmt.Errorf(`"method" is %s, want a method name such as "POST"`, shortJSON(v))
		}
		r.Method = strings.ToUpper(r.Method)
		if r.Method == http.MethodGet {
			r.Method = ""
		}
	}
	if v, ok := raw["headers"]; ok && !isNull(v) {
		if err := json.Unmarshal(v, &r.Headers); err != nil {
			return fmt.Errorf(`"headers" is %s, want an object of strings such as {"Accept": "application/json"}`, shortJSON(v))
		}
	}
	if v, ok := raw["body"]; ok && !isNull(v) {
		var b bytes.Buffer
		if err := json.Compact(&b, v); err != nil {
			return fmt.Errorf(`"body": %v`, err)
		}
		r.Body = b.Bytes()
	}
	if v, ok := raw["id"]; ok && !isNull(v) {
		var b bytes.Buffer
		_ = json.Compact(&b, v) // valid: it decoded
		if c := b.Bytes()[0]; c != '"' && c != '-' && (c < '0' || c > '9') {
			return fmt.Errorf(`"id" is %s, want a string or a number`, shortJSON(v))
		}
		r.ID = b.Bytes()
	}
	if v, ok := raw["cost"]; ok && !isNull(v) {
		c, err := readCost(v)
		if err != nil {
			return fmt.Errorf(`"cost" is %s: %v; want a positive whole number of units (tokens) such as 1200, or each bucket's, such as {"input_tokens": 1200, "output_tokens": 300}`, shortJSON(v), err)
		}
		r.Cost = c
	}
	e.JSON = &r
	return nil
}

// readCost reads a line's "cost": a number, or an object of numbers by
// bucket name.
func readCost(v json.RawMessage) (transport.Costs, error) {
	var n int64
	if json.Unmarshal(v, &n) == nil {
		if n <= 0 {
			return nil, fmt.Errorf("not positive")
		}
		return transport.Costs{"": n}, nil
	}
	var m map[string]int64
	if err := json.Unmarshal(v, &m); err != nil || len(m) == 0 {
		return nil, fmt.Errorf("neither a whole number nor an object of them")
	}
	c := transport.Costs{}
	for name, n := range m {
		b, ok := transport.CostBucket(name)
		if !ok || b == "" {
			return nil, fmt.Errorf("no bucket %q", name)
		}
		if n <= 0 {
			return nil, fmt.Errorf("%s is not positive", name)
		}
		c[b] = n
	}
	return c, nil
}

// validMethod reports whether m is an HTTP method name (RFC 9110 token).
func validMethod(m string) bool {
	if m == "" {
		return false
	}
	for _, c := range m {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("!#$%&'*+-.^_`|~", c)) {
			return false
		}
	}
	return true
}

func isNull(v json.RawMessage) bool { return string(bytes.TrimSpace(v)) == "null" }

func shortJSON(v json.RawMessage) string { return shorten(string(bytes.TrimSpace(v))) }

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// bodyText is what goes on the wire for body as a JSON line gives it, and
// whether it is JSON (a string is sent as the text it holds).
func bodyText(body json.RawMessage) (string, bool) {
	if len(body) == 0 {
		return "", false
	}
	var s string
	if body[0] == '"' && json.Unmarshal(body, &s) == nil {
		return s, false
	}
	return string(body), true
}

// headerValue returns the value of header name in h, whatever its case.
func headerValue(h map[string]string, name string) (string, bool) {
	for k, v := range h {
		if strings.EqualFold(k, name) {
			return v, true
		}
	}
	return "", false
}

// idempotent reports whether a request may reach the server twice without
// harm: RFC 9110's idempotent methods, a request carrying an
// Idempotency-Key, and a GraphQL query (a read, though it is a POST).
func idempotent(method string, h map[string]string, u *url.URL, body string) bool {
	switch method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	if _, ok := headerValue(h, "Idempotency-Key"); ok {
		return true
	}
	if _, ok := headerValue(h, "X-Idempotency-Key"); ok {
		return true
	}
	return method == http.MethodPost && graphQLQuery(u, body)
}

// graphQLQuery reports whether a POST to u with body is a GraphQL query
// (not a mutation): the path ends in /graphql and the body's "query",
// past blanks and comments, starts with a query or a selection.
func graphQLQuery(u *url.URL, body string) bool {
	if !strings.HasSuffix(strings.TrimSuffix(u.Path, "/"), "/graphql") {
		return false
	}
	var in struct {
		Query string `json:"query"`
	}
	if json.Unmarshal([]byte(body), &in) != nil || in.Query == "" {
		return false
	}
	q := in.Query
	for {
		q = strings.TrimLeft(q, " \t\r\n,\ufeff")
		if !strings.HasPrefix(q, "#") {
			break
		}
		if i := strings.IndexAny(q, "\r\n"); i >= 0 {
			q = q[i:]
		} else {
			q = ""
		}
	}
	if strings.HasPrefix(q, "{") {
		return true
	}
	word := q[:len(q)-len(strings.TrimLeft(q, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_"))]
	return word == "query"
}

// bodyDigest names a body in keys: the first 16 hex digits of its
// SHA-256.
func bodyDigest(body string) string {
	sum := sha256.Sum256([]byte(body))
	return hex.EncodeToString(sum[:8])
}
