package sim

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// GitHub's GraphQL API ("Rate limits and query limits for the GraphQL
// API"): a query costs points — its connections' first/last sizes, see
// gqlCost — counted in x-ratelimit-used and -remaining of the graphql
// resource; a query the points left cannot pay is answered 200 with an
// error of type RATE_LIMITED (see githubDialect.exhausted). For the
// secondary limits a query costs 1 point and a mutation 5, against their
// own budget of 2,000 a minute.

// ghGraphQLRequest is the body of POST /graphql.
type ghGraphQLRequest struct {
	Query         string         `json:"query"`
	Variables     map[string]any `json:"variables"`
	OperationName string         `json:"operationName"`
}

// ghGraphQLEndpoint reads and prices the query before any quota is spent,
// as GitHub does: the cost is what the bucket is charged.
func ghGraphQLEndpoint(c *call) endpoint {
	body, _ := io.ReadAll(io.LimitReader(c.r.Body, 1<<20))
	var in ghGraphQLRequest
	if err := json.Unmarshal(body, &in); err != nil || strings.TrimSpace(in.Query) == "" {
		return endpoint{res: 3, graphql: true, dynamic: func(*call, bucketState) *rendered {
			return ghError(http.StatusBadRequest, "Problems parsing JSON", "https://docs.github.com/graphql")
		}}
	}
	doc, err := parseGraphQL(in.Query)
	var op *gqlOp
	if err == nil {
		op, err = doc.operation(in.OperationName)
	}
	if err != nil {
		msg := err.Error()
		return endpoint{res: 3, graphql: true, dynamic: func(*call, bucketState) *rendered {
			return jsonBody(http.StatusOK, map[string]any{"errors": []map[string]any{{"message": msg}}})
		}}
	}
	vars := op.variables(in.Variables)
	cost, nodes := doc.gqlCost(op, vars)
	mutation := op.kind == "mutation"
	return endpoint{res: 3, graphql: true, write: mutation, cost: cost, dynamic: func(c *call, st bucketState) *rendered {
		g := &ghGQL{c: c, st: st, doc: doc, vars: vars, cost: cost, nodes: nodes}
		root := "Query"
		if mutation {
			root = "Mutation"
		}
		data := g.object(root, op.sel, []any{strings.ToLower(root)}, g.root(mutation))
		if len(g.errs) > 0 {
			return jsonBody(http.StatusOK, map[string]any{"errors": g.errs})
		}
		return jsonBody(http.StatusOK, gqlObject{keys: []string{"data"}, vals: []any{data}})
	}}
}

// ghGQL runs one query against the simulator's synthetic content.
type ghGQL struct {
	c           *call
	st          bucketState
	doc         *gqlDoc
	vars        map[string]any
	cost, nodes int64
	errs        []map[string]any
}

// resolver answers one field of an object type: its value, or false when
// the type has no such field.
type resolver func(s *gqlSel, path []any) (any, bool)

// gqlObject is a JSON object whose keys keep the query's order, as
// GraphQL answers do.
type gqlObject struct {
	keys []string
	vals []any
}

func (o gqlObject) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range o.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		b.Write(kb)
		b.WriteByte(':')
		vb, err := json.Marshal(o.vals[i])
		if err != nil {
			return nil, err
		}
		b.Write(vb)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// object answers the selection sel on an object of type typ.
func (g *ghGQL) object(typ string, sel []gqlSel, path []any, field resolver) gqlObject {
	var o gqlObject
	for _, s := range g.doc.flatten(sel, 0) {
		at := append(path[:len(path):len(path)], s.key())
		var v any
		ok := true
		if s.name == "__typename" {
			v = typ
		} else {
			v, ok = field(&s, at)
		}
		if !ok {
			g.errs = append(g.errs, map[string]any{
				"path":       at,
				"extensions": map[string]string{"code": "undefinedField", "typeName": typ, "fieldName": s.name},
				"message":    fmt.Sprintf("Field '%s' doesn't exist on type '%s'", s.name, typ),
			})
			continue
		}
		o.keys, o.vals = append(o.keys, s.key()), append(o.vals, v)
	}
	return o
}

// str reads a string argument.
func (g *ghGQL) str(s *gqlSel, name string) string {
	v, _ := s.arg(name, g.vars)
	str, _ := v.(string)
	return str
}

func (g *ghGQL) root(mutation bool) resolver {
	if mutation {
		return func(s *gqlSel, path []any) (any, bool) {
			// Every mutation succeeds and says nothing but its id.
			input, _ := s.arg("input", g.vars)
			m, _ := input.(map[string]any)
			payload := strings.ToUpper(s.name[:1]) + s.name[1:] + "Payload"
			return g.object(payload, s.sel, path, func(f *gqlSel, _ []any) (any, bool) {
				if f.name == "clientMutationId" {
					return m["clientMutationId"], true
				}
				return nil, false
			}), true
		}
	}
	return func(s *gqlSel, path []any) (any, bool) {
		switch s.name {
		case "viewer":
			return g.user(g.c.own.name, g.c.own.id, s, path), true
		case "user":
			login := g.str(s, "login")
			return g.user(login, g.c.a.ownerID(login), s, path), true
		case "repository":
			return g.repository(g.str(s, "owner"), g.str(s, "name"), s, path), true
		case "rateLimit":
			return g.object("RateLimit", s.sel, path, g.rateLimit), true
		}
		return nil, false
	}
}

func (g *ghGQL) rateLimit(s *gqlSel, _ []any) (any, bool) {
	switch s.name {
	case "limit":
		return g.st.limit, true
	case "cost":
		return g.cost, true
	case "remaining":
		return g.st.remaining, true
	case "used":
		return g.st.used, true
	case "resetAt":
		return isoTime(time.Unix(g.st.reset, 0)), true
	case "nodeCount":
		return g.nodes, true
	}
	return nil, false
}

// user answers a User object.
func (g *ghGQL) user(login string, id int64, sel *gqlSel, path []any) gqlObject {
	return g.object("User", sel.sel, path, func(s *gqlSel, at []any) (any, bool) {
		switch s.name {
		case "login":
			return login, true
		case "name":
			return capitalize(login), true
		case "id":
			return "U_kgDO" + hexID(uint64(id), 6), true
		case "databaseId":
			return id, true
		case "url":
			return "https://github.com/" + login, true
		case "repositories":
			total := int(seedOf("repos", login)%60) + 1
			return g.connection("Repository", s, at, total, func(i int, ns *gqlSel, np []any) any {
				return g.repository(login, "project-"+strconv.Itoa(i), ns, np)
			}), true
		}
		return nil, false
	})
}

// repository answers a Repository object, as REST's /repos/{o}/{r} and
// its issues listing describe it (the same versions).
func (g *ghGQL) repository(o, r string, sel *gqlSel, path []any) any {
	if o == "" || r == "" {
		return nil
	}
	h := seedOf("repo", o, r)
	rest := "/repos/" + url.PathEscape(o) + "/" + url.PathEscape(r)
	created := stamp(h)
	return g.object("Repository", sel.sel, path, func(s *gqlSel, at []any) (any, bool) {
		switch s.name {
		case "name":
			return r, true
		case "nameWithOwner":
			return o + "/" + r, true
		case "id":
			return "R_kgDO" + hexID(h, 6), true
		case "databaseId":
			return int64(h % 900_000_000), true
		case "description":
			return capitalize(phrase(h, 5)), true
		case "url":
			return "https://github.com/" + o + "/" + r, true
		case "stargazerCount":
			return (h >> 10) % 20_000, true
		case "forkCount":
			return (h >> 40) % 2_000, true
		case "isPrivate":
			return false, true
		case "createdAt":
			return isoTime(created), true
		case "updatedAt":
			return isoTime(created.Add(ghHours(h%5000 + g.c.a.version(rest, false, g.c.realNow)))), true
		case "owner":
			return g.user(o, g.c.a.ownerID(o), s, at), true
		case "issues":
			version := g.c.a.version(rest+"/issues", false, g.c.realNow)
			return g.connection("Issue", s, at, ghIssueTotal(o, r, version), func(i int, ns *gqlSel, np []any) any {
				return g.issue(o, r, i+1, ns, np)
			}), true
		}
		return nil, false
	})
}

// issue answers an Issue object: issue number n of o/r.
func (g *ghGQL) issue(o, r string, n int, sel *gqlSel, path []any) any {
	h := seedOf("issue", o, r, strconv.Itoa(n))
	author := "user" + strconv.Itoa(int(h%50)+1)
	return g.object("Issue", sel.sel, path, func(s *gqlSel, at []any) (any, bool) {
		switch s.name {
		case "number":
			return n, true
		case "title":
			return capitalize(phrase(h, 6)), true
		case "body":
			return phrase(h>>7, 12) + ".", true
		case "state":
			if h%4 == 0 {
				return "CLOSED", true
			}
			return "OPEN", true
		case "url":
			return "https://github.com/" + o + "/" + r + "/issues/" + strconv.Itoa(n), true
		case "createdAt":
			return isoTime(stamp(seedOf("repo", o, r)).Add(ghHours(uint64(n) * 7))), true
		case "author":
			return g.user(author, g.c.a.ownerID(author), s, at), true
		case "labels":
			return g.connection("Label", s, at, int(h%4), func(i int, ns *gqlSel, np []any) any {
				name := words[(h>>uint(i*5))%uint64(len(words))]
				return g.object("Label", ns.sel, np, func(f *gqlSel, _ []any) (any, bool) {
					if f.name == "name" {
						return name, true
					}
					return nil, false
				})
			}), true
		case "comments":
			return g.connection("IssueComment", s, at, int(h%30), func(i int, ns *gqlSel, np []any) any {
				hc := seedOf("comment", o, r, strconv.Itoa(n), strconv.Itoa(i))
				return g.object("IssueComment", ns.sel, np, func(f *gqlSel, fp []any) (any, bool) {
					switch f.name {
					case "body":
						return phrase(hc, 8) + ".", true
					case "author":
						who := "user" + strconv.Itoa(int(hc%50)+1)
						return g.user(who, g.c.a.ownerID(who), f, fp), true
					}
					return nil, false
				})
			}), true
		}
		return nil, false
	})
}

// connection answers a connection of total items of type typ, paginated
// by first/last and after/before cursors as GitHub's are: one of first
// and last is required, and neither may exceed 100.
func (g *ghGQL) connection(typ string, sel *gqlSel, path []any, total int, node func(i int, s *gqlSel, path []any) any) any {
	start, end := 0, total
	if c, ok := decodeCursor(g.str(sel, "after")); ok {
		start = min(c+1, total)
	}
	if c, ok := decodeCursor(g.str(sel, "before")); ok {
		end = max(min(c, end), start)
	}
	first, hasFirst := sel.arg("first", g.vars)
	last, hasLast := sel.arg("last", g.vars)
	nf, okf := gqlInt(first)
	nl, okl := gqlInt(last)
	switch {
	case !okf && !okl || hasFirst && !okf && first != nil || hasLast && !okl && last != nil:
		g.errs = append(g.errs, map[string]any{"path": path, "message": fmt.Sprintf("You must provide a `first` or `last` value to properly paginate the `%s` connection.", sel.name)})
		return nil
	case nf > 100 || nl > 100:
		g.errs = append(g.errs, map[string]any{"path": path, "message": fmt.Sprintf("Requesting %d records on the `%s` connection exceeds the `first` limit of 100 records.", max(nf, nl), sel.name)})
		return nil
	}
	if okf {
		end = min(end, start+int(max(nf, 0)))
	}
	if okl {
		start = max(start, end-int(max(nl, 0)))
	}
	return g.object(typ+"Connection", sel.sel, path, func(s *gqlSel, at []any) (any, bool) {
		switch s.name {
		case "totalCount":
			return total, true
		case "nodes":
			nodes := make([]any, 0, end-start)
			for i := start; i < end; i++ {
				nodes = append(nodes, node(i, s, append(at[:len(at):len(at)], i-start)))
			}
			return nodes, true
		case "edges":
			edges := make([]any, 0, end-start)
			for i := start; i < end; i++ {
				ep := append(at[:len(at):len(at)], i-start)
				edges = append(edges, g.object(typ+"Edge", s.sel, ep, func(f *gqlSel, fp []any) (any, bool) {
					switch f.name {
					case "cursor":
						return encodeCursor(i), true
					case "node":
						return node(i, f, fp), true
					}
					return nil, false
				}))
			}
			return edges, true
		case "pageInfo":
			return g.object("PageInfo", s.sel, at, func(f *gqlSel, _ []any) (any, bool) {
				switch f.name {
				case "hasNextPage":
					return end < total, true
				case "hasPreviousPage":
					return start > 0, true
				case "startCursor", "endCursor":
					if end <= start {
						return nil, true
					}
					if f.name == "startCursor" {
						return encodeCursor(start), true
					}
					return encodeCursor(end - 1), true
				}
				return nil, false
			}), true
		}
		return nil, false
	})
}

// encodeCursor makes an opaque cursor for item i, like GitHub's base64.
func encodeCursor(i int) string {
	return base64.StdEncoding.EncodeToString([]byte("cursor:v2:" + strconv.Itoa(i)))
}

func decodeCursor(s string) (int, bool) {
	if s == "" {
		return 0, false
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return 0, false
	}
	n, err := strconv.Atoi(strings.TrimPrefix(string(b), "cursor:v2:"))
	return n, err == nil && n >= 0
}
