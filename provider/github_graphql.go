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
// for a body that is not a GraphQL request.
func priceGraphQL(body []byte) (Query, bool) {
	var in graphqlRequest
	if json.Unmarshal(body, &in) != nil || strings.TrimSpace(in.Query) == "" {
		return Query{}, false
	}
	doc := lexGraphQL(in.Query)
	cost, mutation := doc.estimate(in.OperationName, in.Variables)
	return Query{Shape: strings.Join(doc.words, " ") + "\x00" + in.OperationName, Units: int(cost), Mutation: mutation}, true
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

// graphqlDoc is a GraphQL document as tokens: names, numbers, variables
// ($name, one token), punctuation and "..."; strings are dropped.
type graphqlDoc struct {
	words []string
}

// lexGraphQL splits a GraphQL document into tokens, dropping commas,
// comments and string values (which never decide a cost).
func lexGraphQL(src string) graphqlDoc {
	var d graphqlDoc
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == ',':
			i++
		case c == '#':
			for i < len(src) && src[i] != '\n' {
				i++
			}
		case c == '"':
			i = skipGraphQLString(src, i)
			d.words = append(d.words, `""`)
		case strings.HasPrefix(src[i:], "..."):
			d.words, i = append(d.words, "..."), i+3
		case isNameByte(c) || c == '$' || c == '-':
			j := i + 1
			for j < len(src) && (isNameByte(src[j]) || src[j] == '.') {
				j++
			}
			d.words, i = append(d.words, src[i:j]), j
		default:
			d.words, i = append(d.words, src[i:i+1]), i+1
		}
	}
	return d
}

func isNameByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// skipGraphQLString returns the index after the string or block string
// starting at i.
func skipGraphQLString(src string, i int) int {
	if strings.HasPrefix(src[i:], `"""`) {
		if end := strings.Index(src[i+3:], `"""`); end >= 0 {
			return i + 3 + end + 3
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

// estimate prices the operation named op (the first when op is empty) by
// GitHub's formula and says whether it is a mutation.
func (d graphqlDoc) estimate(op string, vars map[string]any) (cost int64, mutation bool) {
	w := d.words
	start := -1
	for i := 0; i < len(w) && start < 0; i++ {
		switch {
		case w[i] == "fragment":
			i = d.skipBlock(i)
		case w[i] == "{" && op == "":
			start = i
		case w[i] == "query" || w[i] == "mutation" || w[i] == "subscription":
			name := ""
			if i+1 < len(w) && w[i+1] != "(" && w[i+1] != "{" && w[i+1] != "@" {
				name = w[i+1]
			}
			if op == "" || name == op {
				mutation = w[i] == "mutation"
				start = d.next(i, "{")
			} else {
				i = d.skipBlock(i)
			}
		}
	}
	if start < 0 {
		return 1, mutation
	}
	e := estimator{d: d, vars: vars}
	e.selection(start, 1, 0)
	return max(int64(math.Round(float64(e.requests)/100)), 1), mutation
}

// next returns the index of the first tok at or after i, or -1.
func (d graphqlDoc) next(i int, tok string) int {
	for ; i < len(d.words); i++ {
		if d.words[i] == tok {
			return i
		}
	}
	return -1
}

// skipBlock returns the index of the "}" closing the first block at or
// after i (len(words) when unclosed).
func (d graphqlDoc) skipBlock(i int) int {
	i = d.next(i, "{")
	if i < 0 {
		return len(d.words)
	}
	return d.close(i)
}

// close returns the index of the "}" (or ")") matching the opening token
// at i.
func (d graphqlDoc) close(i int) int {
	open, shut := d.words[i], "}"
	if open == "(" {
		shut = ")"
	}
	depth := 0
	for ; i < len(d.words); i++ {
		switch d.words[i] {
		case open:
			depth++
		case shut:
			if depth--; depth == 0 {
				return i
			}
		}
	}
	return len(d.words)
}

// estimator sums the requests a query's connections need.
type estimator struct {
	d        graphqlDoc
	vars     map[string]any
	requests int64
}

// selection walks the selection set opening at i, under parents nodes;
// it returns the index of its closing "}".
func (e *estimator) selection(i int, parents int64, depth int) int {
	w := e.d.words
	end := e.d.close(i)
	if depth > 30 {
		return end
	}
	for i++; i < end; i++ {
		switch {
		case w[i] == "...":
			i = e.fragment(i, parents, depth)
		case isNameByte(w[i][0]) && i+1 < end && w[i+1] == ":":
			// An alias: the field follows.
		case isNameByte(w[i][0]):
			i = e.field(i, end, parents, depth)
		}
	}
	return end
}

// fragment walks a spread (... Name) or an inline fragment (... on T {})
// at i as part of the selection around it, and returns the index of its
// last token.
func (e *estimator) fragment(i int, parents int64, depth int) int {
	w := e.d.words
	if i+1 >= len(w) {
		return i
	}
	if w[i+1] == "on" || w[i+1] == "{" || w[i+1] == "@" {
		if open := e.d.next(i, "{"); open >= 0 {
			return e.selection(open, parents, depth+1)
		}
		return len(w)
	}
	for j := 0; j+2 < len(w); j++ {
		if w[j] == "fragment" && w[j+1] == w[i+1] {
			if open := e.d.next(j, "{"); open >= 0 {
				e.selection(open, parents, depth+1)
			}
			break
		}
	}
	return i + 1
}

// field walks the field named at i (arguments, directives, selection) and
// returns the index of its last token.
func (e *estimator) field(i, end int, parents int64, depth int) int {
	w := e.d.words
	size, connection := int64(0), false
	if i+1 < end && w[i+1] == "(" {
		shut := e.d.close(i + 1)
		size, connection = e.connectionSize(i+1, shut)
		i = shut
	}
	for i+1 < end && w[i+1] == "@" { // directives
		i += 2
		if i+1 < end && w[i+1] == "(" {
			i = e.d.close(i + 1)
		}
	}
	children := parents
	if connection {
		e.requests += parents
		children = parents * max(size, 1)
	}
	if i+1 < end && w[i+1] == "{" {
		i = e.selection(i+1, children, depth+1)
	}
	return i
}

// connectionSize reads first: or last: among the arguments between the
// parentheses at open and shut: a number, or a variable's value.
func (e *estimator) connectionSize(open, shut int) (int64, bool) {
	w := e.d.words
	for j := open + 1; j+2 < shut+1; j++ {
		if (w[j] != "first" && w[j] != "last") || w[j+1] != ":" {
			continue
		}
		v := w[j+2]
		if strings.HasPrefix(v, "$") {
			switch n := e.vars[v[1:]].(type) {
			case float64:
				return int64(n), true
			case int:
				return int64(n), true
			}
			return 0, true
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		return n, true
	}
	return 0, false
}
