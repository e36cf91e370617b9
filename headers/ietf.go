package headers

import (
	"math"
	"strings"
	"time"

	"github.com/dunglas/httpsfv"
)

// policy is one RateLimit-Policy item.
type policy struct {
	name   string
	quota  int64
	window time.Duration
	unit   string
}

// serviceLimit is one RateLimit item.
type serviceLimit struct {
	name      string
	remaining int64
	reset     time.Duration
	hasReset  bool
}

// readStructured reads the IETF draft's RateLimit and RateLimit-Policy
// fields (draft-ietf-httpapi-ratelimit-headers-08 and later, including
// items split over several field lines) into one group per policy. It
// reports whether anything was usable.
func (p *parser) readStructured(rateLimit, ratePolicy []string) bool {
	var limits []serviceLimit
	var policies []policy
	var dictLimit *group
	if len(rateLimit) > 0 {
		limits, dictLimit = p.parseServiceLimits(rateLimit)
		if len(limits) > 0 || dictLimit != nil {
			p.markUsed("ratelimit")
		}
	}
	if len(ratePolicy) > 0 {
		policies = parsePolicies(ratePolicy)
		if len(policies) > 0 {
			p.markUsed("ratelimit-policy")
		}
	}
	if len(limits) == 0 && len(policies) == 0 && dictLimit == nil {
		return false
	}

	findPolicy := func(name string) *policy {
		for i := range policies {
			if policies[i].name == name {
				return &policies[i]
			}
		}
		return nil
	}
	if len(limits) == 1 && len(policies) == 1 && findPolicy(limits[0].name) == nil {
		// One quota described twice under two names: the server can
		// only mean the one policy it announced.
		policies[0].name = limits[0].name
	}
	for _, l := range limits {
		g := p.group(l.name)
		if g == nil {
			break
		}
		g.ietf = true
		g.remaining = minCount(g.remaining, l.remaining)
		if l.hasReset {
			g.laterReset(p.now.Add(l.reset), true)
		}
		if pol := findPolicy(l.name); pol != nil {
			g.limit = minCount(g.limit, pol.quota)
			if pol.window > 0 {
				g.window = pol.window
			}
			g.otherUnit = pol.unit != "" && pol.unit != "requests" && pol.unit != "request"
		}
	}
	if dictLimit != nil && len(policies) > 0 && dictLimit.window == 0 {
		// Draft-07: RateLimit-Policy lists "quota;w=window" items; the
		// one whose quota equals the stated limit gives the window.
		for _, pol := range policies {
			if pol.quota == dictLimit.limit && pol.window > 0 {
				dictLimit.window = pol.window
				break
			}
		}
	}
	if len(limits) == 0 && dictLimit == nil {
		// Only policies: report each quota, without a remaining count.
		for _, pol := range policies {
			if pol.unit != "" && pol.unit != "requests" && pol.unit != "request" {
				continue
			}
			g := p.group(pol.name)
			if g == nil {
				break
			}
			g.ietf = true
			g.limit = minCount(g.limit, pol.quota)
			g.window = pol.window
		}
	}
	return true
}

// parseServiceLimits parses RateLimit field lines. A valid RFC 9651 List is
// read item by item, ignoring malformed items (no r, r not a non-negative
// number) as the draft requires. A value that is not valid structured
// syntax is read leniently instead — servers send near misses such as
// unquoted names, spaces around "=", or draft-07's dictionary form
// "limit=100, remaining=50, reset=30" — with the same per-item rules.
func (p *parser) parseServiceLimits(lines []string) ([]serviceLimit, *group) {
	var out []serviceLimit
	if items, ok := listItems(lines); ok {
		for _, item := range items {
			name, ok := itemName(item.Value)
			if !ok {
				continue
			}
			if l, ok := serviceLimitFrom(name, item.Params.Get); ok {
				out = append(out, l)
			}
		}
		if len(out) > 0 {
			return out, nil
		}
	}
	if d, err := httpsfv.UnmarshalDictionary(lines); err == nil {
		if g := p.dictionaryLimit(func(k string) (any, bool) {
			m, ok := d.Get(k)
			if !ok {
				return nil, false
			}
			item, ok := m.(httpsfv.Item)
			if !ok {
				return nil, false
			}
			return item.Value, true
		}); g != nil {
			return nil, g
		}
	}
	// Lenient fallback.
	dict := map[string]string{}
	for _, raw := range splitItems(lines) {
		parts := strings.Split(raw, ";")
		head := strings.TrimSpace(parts[0])
		if len(parts) == 1 {
			if k, v, ok := strings.Cut(head, "="); ok {
				dict[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
			}
			continue
		}
		name := lenientName(parts)
		params := lenientParams(parts[1:])
		if l, ok := serviceLimitFrom(name, params); ok {
			out = append(out, l)
		}
	}
	if len(out) > 0 {
		return out, nil
	}
	if len(dict) > 0 {
		return nil, p.dictionaryLimit(func(k string) (any, bool) {
			v, ok := dict[k]
			return v, ok
		})
	}
	return nil, nil
}

// dictionaryLimit reads draft-07's RateLimit: limit=, remaining=, reset=
// into the unnamed group.
func (p *parser) dictionaryLimit(get func(string) (any, bool)) *group {
	rem, okR := paramCount(get, "remaining")
	lim, okL := paramCount(get, "limit")
	reset, okT := paramSeconds(get, "reset")
	if !okR && !okL && !okT {
		return nil
	}
	g := p.group("")
	if g == nil {
		return nil
	}
	g.ietf = true
	if okR {
		g.remaining = minCount(g.remaining, rem)
	}
	if okL {
		g.limit = minCount(g.limit, lim)
	}
	if okT {
		g.laterReset(p.now.Add(reset), true)
	}
	return g
}

func serviceLimitFrom(name string, get func(string) (any, bool)) (serviceLimit, bool) {
	r, ok := paramCount(get, "r")
	if !ok {
		return serviceLimit{}, false
	}
	l := serviceLimit{name: name, remaining: r}
	l.reset, l.hasReset = paramSeconds(get, "t")
	return l, true
}

// parsePolicies parses RateLimit-Policy field lines, strictly first and
// leniently when the value is not valid structured syntax. Items without a
// non-negative q are ignored. Draft-07's bare "100;w=60" items are
// accepted as unnamed policies.
func parsePolicies(lines []string) []policy {
	var out []policy
	add := func(name string, bare any, get func(string) (any, bool)) {
		q, ok := paramCount(get, "q")
		if !ok {
			// Draft-07 style: the item itself is the quota.
			if v, isNum := numberOf(bare); isNum && v >= 0 && v <= maxExactNumber {
				q, ok = int64(v), true
			}
		}
		if !ok {
			return
		}
		pol := policy{name: name, quota: q}
		if w, ok := paramSeconds(get, "w"); ok && w > 0 {
			pol.window = w
		}
		if u, ok := get("qu"); ok {
			if s, ok := itemName(u); ok {
				pol.unit = strings.ToLower(s)
			}
		}
		out = append(out, pol)
	}
	if items, ok := listItems(lines); ok {
		for _, item := range items {
			name, _ := itemName(item.Value)
			add(name, item.Value, item.Params.Get)
		}
		return out
	}
	for _, raw := range splitItems(lines) {
		parts := strings.Split(raw, ";")
		name := lenientName(parts)
		var bare any = name
		if v, ok := parseNumber(name); ok {
			bare, name = v, ""
		}
		add(name, bare, lenientParams(parts[1:]))
	}
	return out
}

// listItems returns the Items of a valid RFC 9651 List (inner lists are
// not rate limits, and are left out), or false when the lines are not one.
func listItems(lines []string) ([]httpsfv.Item, bool) {
	list, err := httpsfv.UnmarshalList(lines)
	if err != nil {
		return nil, false
	}
	var items []httpsfv.Item
	for _, m := range list {
		if item, ok := m.(httpsfv.Item); ok {
			items = append(items, item)
		}
	}
	return items, true
}

// itemName accepts a String or a Token as a policy name (the draft requires
// a String; Tokens are a common near miss).
func itemName(v any) (string, bool) {
	switch s := v.(type) {
	case string:
		return s, true
	case httpsfv.Token:
		return string(s), true
	}
	return "", false
}

func numberOf(v any) (float64, bool) {
	switch n := v.(type) {
	case int64:
		return float64(n), true
	case float64:
		return n, true
	case string:
		return parseNumber(n)
	case httpsfv.Token:
		return parseNumber(string(n))
	}
	return 0, false
}

// paramCount reads a non-negative count; a Decimal is rounded down.
func paramCount(get func(string) (any, bool), key string) (int64, bool) {
	v, ok := get(key)
	if !ok {
		return 0, false
	}
	f, ok := numberOf(v)
	if !ok || f < 0 || math.IsNaN(f) || f > maxExactNumber {
		return 0, false
	}
	return int64(math.Floor(f)), true
}

// paramSeconds reads a non-negative number of seconds.
func paramSeconds(get func(string) (any, bool), key string) (time.Duration, bool) {
	v, ok := get(key)
	if !ok {
		return 0, false
	}
	f, ok := numberOf(v)
	if !ok || f < 0 || math.IsNaN(f) {
		return 0, false
	}
	if f >= epochSecondsMin {
		// Not a delta; nobody means a window of 30 years.
		return 0, false
	}
	return secondsToDuration(f), true
}

// splitItems splits field lines into list members on commas outside
// double quotes.
func splitItems(lines []string) []string {
	var out []string
	for _, line := range lines {
		start, quoted := 0, false
		for i := 0; i < len(line); i++ {
			switch line[i] {
			case '"':
				quoted = !quoted
			case ',':
				if !quoted {
					out = append(out, line[start:i])
					start = i + 1
				}
			}
		}
		out = append(out, line[start:])
	}
	return out
}

// lenientName is the policy name of a leniently read item: its last part
// that is not a key=value parameter. Hugging Face sends
// RateLimit-Policy: "fixed window";"api";q=500;w=300, where the first
// string is the kind of window and the second the name its RateLimit items
// use.
func lenientName(parts []string) string {
	name := ""
	for _, part := range parts {
		part = strings.TrimSpace(part)
		if part == "" || strings.IndexByte(part, '=') >= 0 {
			continue
		}
		name = strings.Trim(part, `"`)
	}
	return name
}

// lenientParams reads "key=value" parameters with any spacing, case and
// quoting.
func lenientParams(parts []string) func(string) (any, bool) {
	m := make(map[string]any, len(parts))
	for _, part := range parts {
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			continue
		}
		k = strings.ToLower(strings.TrimSpace(k))
		v = strings.Trim(strings.TrimSpace(v), `"`)
		if _, dup := m[k]; !dup {
			m[k] = v
		}
	}
	return func(k string) (any, bool) {
		v, ok := m[k]
		return v, ok
	}
}
