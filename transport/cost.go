package transport

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// CostHeader is the request header in which a caller gives a request's
// exact cost; it is removed before the request is sent. Its value is a
// whole number, in the units of the bucket that paces the request (a
// language model's tokens, a GraphQL query's points), or each bucket's
// cost by name, comma-separated (see Costs):
//
//	X-Ratekeeper-Cost: 1830
//	X-Ratekeeper-Cost: input-tokens=1200, output-tokens=300
const CostHeader = "X-Ratekeeper-Cost"

// Costs is what a request takes of each bucket it is charged from, by the
// bucket's name: "requests", "tokens" (OpenAI's), "input-tokens" and
// "output-tokens" (Anthropic's; "input_tokens" is the same name), and
// "points" (a GraphQL query's). The empty name is the bucket that paces
// the request, whatever it is called (what WithCost sets). A bucket the
// costs do not name is charged its estimate.
type Costs map[string]int64

// costBuckets are the names Costs knows.
var costBuckets = []string{"requests", "tokens", "input-tokens", "output-tokens", "points"}

// CostBucket is the name Costs uses for a bucket named name ("input_tokens"
// is "input-tokens"; "" is the pacing bucket), and whether it knows it.
func CostBucket(name string) (string, bool) {
	n := strings.ReplaceAll(strings.ToLower(strings.TrimSpace(name)), "_", "-")
	return n, n == "" || slices.Contains(costBuckets, n)
}

// ParseCosts reads CostHeader's value: a whole number (the pacing
// bucket's cost), or name=number pairs separated by commas, or both.
// Every cost must be a positive whole number of a bucket Costs knows.
func ParseCosts(v string) (Costs, error) {
	c := Costs{}
	for item := range strings.SplitSeq(v, ",") {
		name, num, named := strings.Cut(item, "=")
		if !named {
			name, num = "", name
		}
		b, ok := CostBucket(name)
		if !ok || named && b == "" {
			return nil, fmt.Errorf("cost %q: no bucket %q (want one of %s, or a number alone for the bucket that paces the request)",
				v, strings.TrimSpace(name), strings.Join(costBuckets, ", "))
		}
		n, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("cost %q: %q is not a positive whole number", v, strings.TrimSpace(num))
		}
		c[b] = n
	}
	return c, nil
}

// String is c as CostHeader's value, names sorted, the pacing bucket's
// cost first.
func (c Costs) String() string {
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(c)) {
		if name == "" {
			parts = append([]string{strconv.FormatInt(c[name], 10)}, parts...)
		} else {
			parts = append(parts, name+"="+strconv.FormatInt(c[name], 10))
		}
	}
	return strings.Join(parts, ", ")
}

// pacing is the cost of the bucket of this name when it paces the
// request: the cost named for it, else the pacing bucket's.
func (c Costs) pacing(name string) (int64, bool) {
	if n, ok := c[name]; ok {
		return n, true
	}
	n, ok := c[""]
	return n, ok
}

type costKey struct{}

// WithCost returns a context under which a request costs n units of the
// bucket that paces it (a language model's tokens, a GraphQL query's
// points), instead of the estimate.
func WithCost(ctx context.Context, n int64) context.Context {
	return WithCosts(ctx, Costs{"": n})
}

// WithCosts returns a context under which a request costs what costs name
// of each bucket (see Costs), instead of the estimates. Names it does not
// know, and costs below 1, are ignored.
func WithCosts(ctx context.Context, costs Costs) context.Context {
	c := Costs{}
	for name, n := range costs {
		if b, ok := CostBucket(name); ok && n > 0 {
			c[b] = n
		}
	}
	return context.WithValue(ctx, costKey{}, c)
}

// costsOf is the costs the caller gave req: WithCost or WithCosts, and
// CostHeader for the buckets they do not name. A header that does not
// parse is ignored (the estimates stand).
func costsOf(req *http.Request) Costs {
	c, _ := req.Context().Value(costKey{}).(Costs)
	v := req.Header.Get(CostHeader)
	if v == "" {
		return c
	}
	h, err := ParseCosts(v)
	if err != nil {
		return c
	}
	for name, n := range c {
		h[name] = n
	}
	return h
}
