package provider

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
)

// GitHub's GraphQL API counts points, not requests ("Rate limits and query
// limits for the GraphQL API"): a query costs one point per 100 requests
// its connections need — every connection (a field with a first or last
// argument) one request per node of the connections above it, one at the
// top — rounded to the nearest whole number, at least 1; x-ratelimit-used
// and -remaining of the graphql resource count those points. For the
// secondary limits a query costs 1 point and a mutation 5, against a
// budget of their own (Secondary.GraphQLPointsPerMinute). This file is
// that formula; github.go asks it (githubAPI.PriceQuery).

// graphqlRequest is the body of a POST to a GraphQL endpoint.
type graphqlRequest struct {
	Query         string         `json:"query"`
	Variables     map[string]any `json:"variables"`
	OperationName string         `json:"operationName"`
}

// priceGraphQL prices a GraphQL request body by GitHub's formula: false
// for a body that is not a GraphQL request. The shape is the query's text
// (tokens, so spacing does not matter), its operation name and the points
// the formula gives: one text sent with sizes that price differently is
// two shapes, so the cost learnt for one never stands in for the other.
func priceGraphQL(body []byte) (Query, bool) {
	var in graphqlRequest
	if json.Unmarshal(body, &in) != nil || strings.TrimSpace(in.Query) == "" {
		return Query{}, false
	}
	words := lexGraphQL(in.Query)
	cost, mutation := parseGraphQLDoc(words).price(in.OperationName, in.Variables)
	shape := strings.Join(words, " ") + "\x00" + in.OperationName + "\x00" + strconv.FormatInt(cost, 10)
	return Query{Shape: shape, Units: int(cost), Mutation: mutation}, true
}

// GraphQLCost returns the cost a GitHub GraphQL answer states, when its
// query asked for it (rateLimit { cost }).
func GraphQLCost(body []byte) (int64, bool) {
	var out struct {
		Data struct {
			RateLimit *struct {
				Cost *int64 `json:"cost"`
			} `json:"rateLimit"`
		} `json:"data"`
	}
	if json.Unmarshal(body, &out) != nil || out.Data.RateLimit == nil || out.Data.RateLimit.Cost == nil {
		return 0, false
	}
	return *out.Data.RateLimit.Cost, true
}

// lexGraphQL splits a GraphQL document into tokens: names, numbers,
// variables ($name, one token), punctuation and "..."; commas and
// comments are dropped, and every string becomes "" (a string never
// decides a cost).
func lexGraphQL(src string) []string {
	var words []string
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == ',':
			i++
		case c == '#':
			for i < len(src) && src[i] != '\n' && src[i] != '\r' {
				i++
			}
		case c == '"':
			i = skipGraphQLString(src, i)
			words = append(words, `""`)
		case strings.HasPrefix(src[i:], "..."):
			words, i = append(words, "..."), i+3
		case c == '-' || c >= '0' && c <= '9':
			// A number: "1.5e3" is one token, and so is "-2".
			j := i + 1
			for j < len(src) && (src[j] >= '0' && src[j] <= '9' || src[j] == '.' && !strings.HasPrefix(src[j:], "...") ||
				src[j] == 'e' || src[j] == 'E' || (src[j] == '+' || src[j] == '-') && (src[j-1] == 'e' || src[j-1] == 'E')) {
				j++
			}
			words, i = append(words, src[i:j]), j
		case isNameByte(c) || c == '$':
			// A name, or a variable: never swallows a following
			// "...", as a minified "{login...F}" has it.
			j := i + 1
			for j < len(src) && isNameByte(src[j]) {
				j++
			}
			words, i = append(words, src[i:j]), j
		default:
			words, i = append(words, src[i:i+1]), i+1
		}
	}
	return words
}

func isNameByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// skipGraphQLString returns the index after the string or block string
// starting at i.
func skipGraphQLString(src string, i int) int {
	if strings.HasPrefix(src[i:], `"""`) {
		for j := i + 3; j < len(src); j++ {
			switch {
			case strings.HasPrefix(src[j:], `\"""`):
				j += 3
			case strings.HasPrefix(src[j:], `"""`):
				return j + 3
			}
		}
		return len(src)
	}
	for i++; i < len(src) && src[i] != '"'; i++ {
		if src[i] == '\\' {
			i++
		}
	}
	return min(i+1, len(src))
}

// A GraphQL document as far as its price needs it: its operations (with
// the defaults their variables declare) and fragments, each a tree of
// selections whose only arguments kept are first and last. Reading is
// lenient: a document GitHub would refuse is priced as far as it reads.

type gqlDocument struct {
	ops       []gqlOperation
	fragments map[string][]gqlSelection
}

type gqlOperation struct {
	kind, name string
	defaults   map[string]int64 // the declared defaults that are whole numbers
	sel        []gqlSelection
}

// gqlSelection is a field (key set: its alias or name), a fragment spread
// (spread set) or an inline fragment (neither: sel is its selection).
type gqlSelection struct {
	key    string
	spread string
	sizes  []gqlSize // its first and last arguments: a connection when any
	sel    []gqlSelection
}

// gqlSize is a first or last argument: a whole number, or a variable.
type gqlSize struct {
	n        int64
	variable string
}

// gqlReader reads a token list; at is the next token.
type gqlReader struct {
	words []string
	at    int
	depth int
}

// maxGraphQLDepth bounds the nesting read (and priced): deeper than any
// query GitHub accepts.
const maxGraphQLDepth = 64

func (r *gqlReader) peek(k int) string {
	if r.at+k < len(r.words) {
		return r.words[r.at+k]
	}
	return ""
}

func (r *gqlReader) next() string {
	w := r.peek(0)
	r.at++
	return w
}

// parseGraphQLDoc reads the operations and fragments of a document.
func parseGraphQLDoc(words []string) *gqlDocument {
	d := &gqlDocument{fragments: map[string][]gqlSelection{}}
	r := &gqlReader{words: words}
	for r.at < len(words) {
		switch w := r.peek(0); w {
		case "{":
			d.ops = append(d.ops, gqlOperation{kind: "query", sel: r.selectionSet()})
		case "query", "mutation", "subscription":
			d.ops = append(d.ops, r.operation())
		case "fragment":
			r.next()
			name := r.next()
			if r.peek(0) == "on" {
				r.at += 2
			}
			r.directives()
			sel := r.selectionSet()
			if _, dup := d.fragments[name]; !dup {
				d.fragments[name] = sel
			}
		default:
			r.next()
		}
	}
	return d
}

func (r *gqlReader) operation() gqlOperation {
	op := gqlOperation{kind: r.next(), defaults: map[string]int64{}}
	if w := r.peek(0); w != "(" && w != "{" && w != "@" && w != "" {
		op.name = r.next()
	}
	if r.peek(0) == "(" {
		r.next()
		for w := r.peek(0); w != ")" && w != "" && w != "{"; w = r.peek(0) {
			if !strings.HasPrefix(w, "$") {
				r.next()
				continue
			}
			name := r.next()[1:]
			if r.peek(0) == ":" {
				r.next()
			}
			r.typeRef()
			if r.peek(0) == "=" {
				r.next()
				if v := r.value(); v.variable == "" && v.n >= 0 && v.known() {
					op.defaults[name] = v.n
				}
			}
			r.directives()
		}
		if r.peek(0) == ")" {
			r.next()
		}
	}
	r.directives()
	op.sel = r.selectionSet()
	return op
}

// typeRef skips a type such as [Int!]!.
func (r *gqlReader) typeRef() {
	lists := 0
	for r.peek(0) == "[" {
		r.next()
		lists++
	}
	if isGraphQLName(r.peek(0)) {
		r.next()
	}
	for {
		if r.peek(0) == "!" {
			r.next()
		}
		if lists == 0 || r.peek(0) != "]" {
			return
		}
		r.next()
		lists--
	}
}

func isGraphQLName(w string) bool {
	return w != "" && (w[0] == '_' || w[0] >= 'a' && w[0] <= 'z' || w[0] >= 'A' && w[0] <= 'Z')
}

// directives skips @name and @name(arguments).
func (r *gqlReader) directives() {
	for r.peek(0) == "@" {
		r.at += 2
		if r.peek(0) == "(" {
			r.arguments()
		}
	}
}

// selectionSet reads { selections } when the next token opens one; none
// otherwise.
func (r *gqlReader) selectionSet() []gqlSelection {
	if r.peek(0) != "{" {
		return nil
	}
	r.next()
	r.depth++
	defer func() { r.depth-- }()
	var out []gqlSelection
	for w := r.peek(0); w != "}" && w != ""; w = r.peek(0) {
		switch {
		case w == "...":
			r.next()
			switch nw := r.peek(0); {
			case nw == "on":
				r.at += 2
				fallthrough
			case nw == "{" || nw == "@":
				r.directives()
				out = append(out, gqlSelection{sel: r.nested()})
			default:
				out = append(out, gqlSelection{spread: r.next()})
				r.directives()
			}
		case isGraphQLName(w):
			s := gqlSelection{key: r.next()}
			if r.peek(0) == ":" {
				r.at += 2 // the alias is the key; the field's name does not matter
			}
			if r.peek(0) == "(" {
				s.sizes = r.arguments()
			}
			r.directives()
			s.sel = r.nested()
			out = append(out, s)
		default:
			r.next()
		}
	}
	r.next()
	return out
}

// nested reads a selection set below the current one, within the depth
// bound (skipped beyond it).
func (r *gqlReader) nested() []gqlSelection {
	if r.depth < maxGraphQLDepth {
		return r.selectionSet()
	}
	if r.peek(0) == "{" {
		r.skipBalanced()
	}
	return nil
}

// arguments reads (name: value ...) and returns the first and last among
// them.
func (r *gqlReader) arguments() []gqlSize {
	var sizes []gqlSize
	r.next()
	for w := r.peek(0); w != ")" && w != ""; w = r.peek(0) {
		if !isGraphQLName(w) || r.peek(1) != ":" {
			r.next()
			continue
		}
		r.at += 2
		v := r.value()
		if w == "first" || w == "last" {
			sizes = append(sizes, v)
		}
	}
	r.next()
	return sizes
}

// value reads one value: a whole number or a variable are kept, anything
// else (strings, enums, lists, objects) is skipped and unknown.
func (r *gqlReader) value() gqlSize {
	w := r.peek(0)
	switch {
	case w == "[" || w == "{":
		r.skipBalanced()
		return gqlSize{n: -1}
	case strings.HasPrefix(w, "$"):
		r.next()
		return gqlSize{variable: w[1:]}
	}
	r.next()
	if n, err := strconv.ParseInt(w, 10, 64); err == nil {
		return gqlSize{n: n}
	}
	return gqlSize{n: -1}
}

func (v gqlSize) known() bool { return v.variable != "" || v.n >= 0 }

// skipBalanced moves past the bracketed group opening at the next token.
func (r *gqlReader) skipBalanced() {
	depth := 0
	for r.at < len(r.words) {
		switch r.next() {
		case "{", "[", "(":
			depth++
		case "}", "]", ")":
			if depth--; depth <= 0 {
				return
			}
		}
	}
}

// price prices the operation named op (the first when op is empty) by
// GitHub's formula ("Calculating a rate limit score"): every unique
// connection needs one request per node its parent connections can
// return — one at the top, else the product of the first/last sizes of
// the connections above it — and the cost is the sum over all connections
// ÷ 100, rounded to the nearest whole number, at least 1. A connection is
// a field with a first or last argument; a variable's size is the one sent
// in vars, else the default the operation declares. Fields that share a
// response key in one selection set (the same field selected again,
// directly or through fragments) are one field, as GraphQL merges them;
// aliases make distinct fields. It also says whether the operation is a
// mutation.
func (d *gqlDocument) price(op string, vars map[string]any) (cost int64, mutation bool) {
	var o *gqlOperation
	for i := range d.ops {
		if op == "" || d.ops[i].name == op {
			o = &d.ops[i]
			break
		}
	}
	if o == nil {
		return 1, false
	}
	p := gqlPricer{doc: d, op: o, vars: vars, budget: maxGraphQLVisits}
	p.selections([][]gqlSelection{o.sel}, 1, 0)
	return max((p.requests+50)/100, 1), o.kind == "mutation"
}

// maxGraphQLVisits bounds the selections priced, so that a document whose
// fragments spread each other many times over cannot make pricing slow.
const maxGraphQLVisits = 200_000

// maxGraphQLRequests is where the counts saturate (far past any query
// GitHub accepts: it refuses more than 500,000 nodes).
const maxGraphQLRequests = 1 << 40

type gqlPricer struct {
	doc      *gqlDocument
	op       *gqlOperation
	vars     map[string]any
	requests int64
	budget   int
}

// gqlField is the fields of one response key in a selection set, merged.
type gqlField struct {
	connection bool
	size       int64
	sel        [][]gqlSelection
}

// selections prices the merged selection sets sets under parents nodes.
func (p *gqlPricer) selections(sets [][]gqlSelection, parents int64, depth int) {
	if depth > maxGraphQLDepth {
		return
	}
	var keys []string
	fields := map[string]*gqlField{}
	for _, set := range sets {
		p.collect(set, &keys, fields, 0)
	}
	for _, k := range keys {
		f := fields[k]
		children := parents
		if f.connection {
			p.requests = min(p.requests+parents, maxGraphQLRequests)
			children = maxGraphQLRequests
			if parents <= maxGraphQLRequests/max(f.size, 1) {
				children = parents * max(f.size, 1)
			}
		}
		if len(f.sel) > 0 {
			p.selections(f.sel, children, depth+1)
		}
	}
}

// collect gathers the fields of set by response key, through fragment
// spreads and inline fragments, into fields (keys in their first order).
func (p *gqlPricer) collect(set []gqlSelection, keys *[]string, fields map[string]*gqlField, spreads int) {
	for _, s := range set {
		if p.budget--; p.budget < 0 {
			return
		}
		switch {
		case s.spread != "":
			if spreads < maxGraphQLDepth {
				p.collect(p.doc.fragments[s.spread], keys, fields, spreads+1)
			}
		case s.key == "":
			p.collect(s.sel, keys, fields, spreads)
		default:
			f := fields[s.key]
			if f == nil {
				f = &gqlField{}
				fields[s.key] = f
				*keys = append(*keys, s.key)
			}
			for _, z := range s.sizes {
				f.connection = true
				f.size = max(f.size, min(p.size(z), maxGraphQLRequests))
			}
			if s.sel != nil {
				f.sel = append(f.sel, s.sel)
			}
		}
	}
}

// size resolves a first or last argument: its number, or its variable's
// value as sent, else as declared by default (0 when neither is a whole
// number).
func (p *gqlPricer) size(z gqlSize) int64 {
	if z.variable == "" {
		return max(z.n, 0)
	}
	switch n := p.vars[z.variable].(type) {
	case float64:
		if n >= 0 && n == math.Trunc(n) {
			return int64(min(n, maxGraphQLRequests))
		}
		return 0
	case nil:
		if _, sent := p.vars[z.variable]; sent {
			return 0 // an explicit null: no size
		}
	}
	return p.op.defaults[z.variable]
}
