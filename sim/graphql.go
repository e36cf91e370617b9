package sim

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// A small GraphQL reader: enough of the language (operations, variables,
// arguments, aliases, fragments) to price a query as GitHub does and to
// answer the fields the simulator knows. Directives and type conditions
// are read and ignored.

// gqlDoc is a parsed GraphQL document.
type gqlDoc struct {
	ops       []*gqlOp
	fragments map[string][]gqlSel
}

// gqlOp is one operation of a document.
type gqlOp struct {
	kind string // query, mutation or subscription
	name string
	vars map[string]gqlValue // default values of the declared variables
	sel  []gqlSel
}

// gqlSel is a field, or a fragment spread (spread set), or an inline
// fragment (inline set).
type gqlSel struct {
	alias, name string
	args        []gqlArg
	sel         []gqlSel
	spread      string
	inline      []gqlSel
	isInline    bool
}

type gqlArg struct {
	name string
	val  gqlValue
}

// gqlValue is a literal or a variable ($name, kind 'v').
type gqlValue struct {
	kind byte // 'v' variable, 'i' int, 'f' float, 's' string, 'b' boolean, 'n' null, 'e' enum, 'l' list, 'o' object
	s    string
	list []gqlValue
	obj  []gqlArg
}

// key is the name a field's value goes under in the answer.
func (s *gqlSel) key() string {
	if s.alias != "" {
		return s.alias
	}
	return s.name
}

// arg returns the argument called name resolved against vars: an int
// (int64), a string, a bool, nil, or the JSON value of a variable.
func (s *gqlSel) arg(name string, vars map[string]any) (any, bool) {
	for _, a := range s.args {
		if a.name == name {
			return a.val.resolve(vars), true
		}
	}
	return nil, false
}

func (v gqlValue) resolve(vars map[string]any) any {
	switch v.kind {
	case 'v':
		return vars[v.s]
	case 'i':
		n, _ := strconv.ParseInt(v.s, 10, 64)
		return n
	case 'f':
		f, _ := strconv.ParseFloat(v.s, 64)
		return f
	case 'b':
		return v.s == "true"
	case 'n':
		return nil
	case 'l':
		out := make([]any, len(v.list))
		for i, x := range v.list {
			out[i] = x.resolve(vars)
		}
		return out
	case 'o':
		out := map[string]any{}
		for _, a := range v.obj {
			out[a.name] = a.val.resolve(vars)
		}
		return out
	}
	return v.s // strings and enums
}

// gqlInt reads an argument's value as a count (JSON numbers decode as
// float64); ok is false for anything else.
func gqlInt(v any) (int64, bool) {
	switch n := v.(type) {
	case int64:
		return n, true
	case int:
		return int64(n), true
	case float64:
		if n == math.Trunc(n) {
			return int64(n), true
		}
	}
	return 0, false
}

// variables returns the values op runs with: those sent, and for a
// variable not sent, the default it declares.
func (op *gqlOp) variables(sent map[string]any) map[string]any {
	vars := map[string]any{}
	for name, def := range op.vars {
		vars[name] = def.resolve(nil)
	}
	for name, v := range sent {
		vars[name] = v
	}
	return vars
}

// operation returns the operation to run: the one named, or the only one.
func (d *gqlDoc) operation(name string) (*gqlOp, error) {
	if name == "" {
		if len(d.ops) != 1 {
			return nil, gqlError("An operation name is required")
		}
		return d.ops[0], nil
	}
	for _, op := range d.ops {
		if op.name == name {
			return op, nil
		}
	}
	return nil, gqlError(fmt.Sprintf("No operation named %q", name))
}

// flatten replaces fragment spreads and inline fragments in sel by their
// fields, so an executor or the cost sees fields only.
func (d *gqlDoc) flatten(sel []gqlSel, depth int) []gqlSel {
	if depth > 20 {
		return nil
	}
	var out []gqlSel
	for _, s := range sel {
		switch {
		case s.spread != "":
			out = append(out, d.flatten(d.fragments[s.spread], depth+1)...)
		case s.isInline:
			out = append(out, d.flatten(s.inline, depth+1)...)
		default:
			out = append(out, s)
		}
	}
	return out
}

// gqlCost prices an operation as GitHub documents it ("Calculating a rate
// limit score"): every unique connection (a field with a first or last
// argument) needs one request per parent node it hangs from — one at the
// top, else the product of the first/last sizes of the connections above
// it; the sum over all connections divided by 100 and rounded to the
// nearest whole number is the cost, at least 1. Fields of one response key
// in a selection set are one field, as GraphQL merges them (the same
// connection selected directly and through a fragment is fetched once);
// aliases name distinct fields. vars holds the variables' values, the
// declared defaults filled in. nodes is the most nodes the query could
// return.
func (d *gqlDoc) gqlCost(op *gqlOp, vars map[string]any) (cost, nodes int64) {
	const most = 1 << 40 // counts saturate far beyond GitHub's 500,000-node limit
	var requests int64
	var walk func(sets [][]gqlSel, parents int64, depth int)
	walk = func(sets [][]gqlSel, parents int64, depth int) {
		if depth > 30 {
			return
		}
		type merged struct {
			connection bool
			size       int64
			sel        [][]gqlSel
		}
		var order []string
		byKey := map[string]*merged{}
		for _, set := range sets {
			for _, s := range d.flatten(set, 0) {
				m := byKey[s.key()]
				if m == nil {
					m = &merged{}
					byKey[s.key()] = m
					order = append(order, s.key())
				}
				if n, ok := connectionSize(&s, vars); ok {
					m.connection, m.size = true, max(m.size, min(n, most))
				}
				if len(s.sel) > 0 {
					m.sel = append(m.sel, s.sel)
				}
			}
		}
		for _, k := range order {
			m := byKey[k]
			children := parents
			if m.connection {
				requests = min(requests+parents, most)
				nodes = min(nodes+timesAtMost(parents, m.size, most), most)
				children = timesAtMost(parents, max(m.size, 1), most)
			}
			walk(m.sel, children, depth+1)
		}
	}
	walk([][]gqlSel{op.sel}, 1, 0)
	cost = (requests + 50) / 100
	return max(cost, 1), nodes
}

// timesAtMost is a × b for a, b ≥ 0, or most when that is more.
func timesAtMost(a, b, most int64) int64 {
	if b != 0 && a > most/b {
		return most
	}
	return min(a*b, most)
}

// connectionSize is a connection's first or last argument; ok is false
// for a field that is not a connection.
func connectionSize(s *gqlSel, vars map[string]any) (int64, bool) {
	for _, name := range [...]string{"first", "last"} {
		if v, ok := s.arg(name, vars); ok {
			n, _ := gqlInt(v)
			return max(n, 0), true
		}
	}
	return 0, false
}

// parseGraphQL reads a GraphQL document.
func parseGraphQL(src string) (*gqlDoc, error) {
	p := &gqlParser{src: src}
	p.next()
	d := &gqlDoc{fragments: map[string][]gqlSel{}}
	for p.tok != "" {
		switch {
		case p.tok == "{":
			sel, err := p.selectionSet()
			if err != nil {
				return nil, err
			}
			d.ops = append(d.ops, &gqlOp{kind: "query", sel: sel})
		case p.tok == "query" || p.tok == "mutation" || p.tok == "subscription":
			op, err := p.operation()
			if err != nil {
				return nil, err
			}
			d.ops = append(d.ops, op)
		case p.tok == "fragment":
			p.next()
			name := p.tok
			p.next()
			if p.tok != "on" {
				return nil, p.errorf("expected 'on' after fragment %s", name)
			}
			p.next()
			p.next() // the type
			p.directives()
			sel, err := p.selectionSet()
			if err != nil {
				return nil, err
			}
			d.fragments[name] = sel
		default:
			return nil, p.errorf("unexpected %q", p.tok)
		}
	}
	if len(d.ops) == 0 {
		return nil, gqlError("Parse error: no operation in the document")
	}
	return d, nil
}

// gqlParser is a tokenizer and recursive-descent reader over src. tok is
// the current token ("" at the end); strings keep their quotes.
type gqlParser struct {
	src string
	pos int
	tok string
}

func (p *gqlParser) errorf(format string, args ...any) error {
	return gqlError(fmt.Sprintf("Parse error: "+format+" at offset %d", append(args, p.pos)...))
}

// gqlError is an error the way GitHub words it, capital first.
type gqlError string

func (e gqlError) Error() string { return string(e) }

// next reads the next token, skipping white space, commas and comments.
func (p *gqlParser) next() {
	s := p.src
	for p.pos < len(s) {
		c := s[p.pos]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == ',':
			p.pos++
			continue
		case c == '#':
			for p.pos < len(s) && s[p.pos] != '\n' {
				p.pos++
			}
			continue
		}
		break
	}
	if p.pos >= len(s) {
		p.tok = ""
		return
	}
	start := p.pos
	c := s[p.pos]
	switch {
	case strings.HasPrefix(s[p.pos:], "..."):
		p.pos += 3
	case strings.IndexByte("{}()[]:=!$@|&", c) >= 0:
		p.pos++
	case c == '"':
		p.readString()
	case c == '-' || c >= '0' && c <= '9':
		p.pos++
		for p.pos < len(s) && strings.IndexByte("0123456789.eE+-", s[p.pos]) >= 0 {
			p.pos++
		}
	case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
		for p.pos < len(s) && (s[p.pos] == '_' || s[p.pos] >= 'a' && s[p.pos] <= 'z' || s[p.pos] >= 'A' && s[p.pos] <= 'Z' || s[p.pos] >= '0' && s[p.pos] <= '9') {
			p.pos++
		}
	default:
		p.pos++
	}
	p.tok = s[start:p.pos]
}

// readString moves past a string or block string starting at pos.
func (p *gqlParser) readString() {
	s := p.src
	if strings.HasPrefix(s[p.pos:], `"""`) {
		end := strings.Index(s[p.pos+3:], `"""`)
		if end < 0 {
			p.pos = len(s)
			return
		}
		p.pos += 3 + end + 3
		return
	}
	p.pos++
	for p.pos < len(s) && s[p.pos] != '"' {
		if s[p.pos] == '\\' {
			p.pos++
		}
		p.pos++
	}
	p.pos = min(p.pos+1, len(s))
}

func (p *gqlParser) expect(tok string) error {
	if p.tok != tok {
		return p.errorf("expected %q, found %q", tok, p.tok)
	}
	p.next()
	return nil
}

func (p *gqlParser) operation() (*gqlOp, error) {
	op := &gqlOp{kind: p.tok, vars: map[string]gqlValue{}}
	p.next()
	if p.tok != "(" && p.tok != "{" && p.tok != "@" {
		op.name = p.tok
		p.next()
	}
	if p.tok == "(" {
		p.next()
		for p.tok != ")" && p.tok != "" {
			if err := p.expect("$"); err != nil {
				return nil, err
			}
			name := p.tok
			p.next()
			if err := p.expect(":"); err != nil {
				return nil, err
			}
			p.typeRef()
			op.vars[name] = gqlValue{kind: 'n'}
			if p.tok == "=" {
				p.next()
				v, err := p.value()
				if err != nil {
					return nil, err
				}
				op.vars[name] = v
			}
			p.directives()
		}
		if err := p.expect(")"); err != nil {
			return nil, err
		}
	}
	p.directives()
	sel, err := p.selectionSet()
	op.sel = sel
	return op, err
}

// typeRef skips a type such as [Int!]!.
func (p *gqlParser) typeRef() {
	if p.tok == "[" {
		p.next()
		p.typeRef()
		if p.tok == "]" {
			p.next()
		}
	} else if p.tok != "" {
		p.next()
	}
	if p.tok == "!" {
		p.next()
	}
}

func (p *gqlParser) directives() {
	for p.tok == "@" {
		p.next()
		p.next()
		if p.tok == "(" {
			_, _ = p.arguments()
		}
	}
}

func (p *gqlParser) selectionSet() ([]gqlSel, error) {
	if err := p.expect("{"); err != nil {
		return nil, err
	}
	return items(p, "}", "selection set", p.selection)
}

// items parses what item parses up to the closing token, which it
// consumes; what names the construct for the error of one never closed.
func items[T any](p *gqlParser, closer, what string, item func() (T, error)) ([]T, error) {
	var out []T
	for p.tok != closer {
		if p.tok == "" {
			return nil, p.errorf("unclosed %s", what)
		}
		x, err := item()
		if err != nil {
			return nil, err
		}
		out = append(out, x)
	}
	p.next()
	return out, nil
}

func (p *gqlParser) selection() (gqlSel, error) {
	var s gqlSel
	if p.tok == "..." {
		p.next()
		if p.tok == "on" || p.tok == "{" || p.tok == "@" {
			if p.tok == "on" {
				p.next()
				p.next()
			}
			p.directives()
			sel, err := p.selectionSet()
			s.inline, s.isInline = sel, true
			return s, err
		}
		s.spread = p.tok
		p.next()
		p.directives()
		return s, nil
	}
	if !isGQLName(p.tok) {
		return s, p.errorf("expected a field, found %q", p.tok)
	}
	s.name = p.tok
	p.next()
	if p.tok == ":" {
		p.next()
		s.alias, s.name = s.name, p.tok
		p.next()
	}
	if err := optional(p, "(", p.arguments, &s.args); err != nil {
		return s, err
	}
	p.directives()
	err := optional(p, "{", p.selectionSet, &s.sel)
	return s, err
}

// optional parses a part of a field that is there when the token is open
// (its arguments, its selection set) into *into.
func optional[T any](p *gqlParser, open string, parse func() (T, error), into *T) error {
	if p.tok != open {
		return nil
	}
	v, err := parse()
	if err != nil {
		return err
	}
	*into = v
	return nil
}

func isGQLName(tok string) bool {
	if tok == "" {
		return false
	}
	c := tok[0]
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func (p *gqlParser) arguments() ([]gqlArg, error) {
	p.next() // (
	return items(p, ")", "arguments", func() (gqlArg, error) {
		if !isGQLName(p.tok) {
			return gqlArg{}, p.errorf("expected an argument name, found %q", p.tok)
		}
		return p.pair()
	})
}

// pair parses `name: value`: an argument, or a field of an object value.
func (p *gqlParser) pair() (gqlArg, error) {
	name := p.tok
	p.next()
	if err := p.expect(":"); err != nil {
		return gqlArg{}, err
	}
	v, err := p.value()
	return gqlArg{name, v}, err
}

func (p *gqlParser) value() (gqlValue, error) {
	tok := p.tok
	switch {
	case tok == "$":
		p.next()
		v := gqlValue{kind: 'v', s: p.tok}
		p.next()
		return v, nil
	case tok == "[":
		p.next()
		list, err := items(p, "]", "list", p.value)
		return gqlValue{kind: 'l', list: list}, err
	case tok == "{":
		p.next()
		obj, err := items(p, "}", "object", p.pair)
		return gqlValue{kind: 'o', obj: obj}, err
	case strings.HasPrefix(tok, `"`):
		p.next()
		return gqlValue{kind: 's', s: unquoteGQL(tok)}, nil
	case tok == "true" || tok == "false":
		p.next()
		return gqlValue{kind: 'b', s: tok}, nil
	case tok == "null":
		p.next()
		return gqlValue{kind: 'n'}, nil
	case tok != "" && (tok[0] == '-' || tok[0] >= '0' && tok[0] <= '9'):
		p.next()
		if strings.ContainsAny(tok, ".eE") {
			return gqlValue{kind: 'f', s: tok}, nil
		}
		return gqlValue{kind: 'i', s: tok}, nil
	case isGQLName(tok):
		p.next()
		return gqlValue{kind: 'e', s: tok}, nil
	}
	return gqlValue{}, p.errorf("expected a value, found %q", tok)
}

func unquoteGQL(tok string) string {
	if strings.HasPrefix(tok, `"""`) {
		return strings.TrimSuffix(strings.TrimPrefix(tok, `"""`), `"""`)
	}
	if s, err := strconv.Unquote(tok); err == nil {
		return s
	}
	return strings.Trim(tok, `"`)
}
