package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// graphqlPaging follows a GraphQL connection's pages as `gh api graphql
// --paginate` does: the query takes an $endCursor variable, and each
// answer's first pageInfo { hasNextPage endCursor } says whether there is
// another page and where it starts.
type graphqlPaging struct {
	request map[string]any // the body: query, variables, operationName
}

// newGraphQLPaging reads a GraphQL request body for --paginate; it is nil
// (with no error) when u is not a GraphQL endpoint or body no GraphQL
// request.
func newGraphQLPaging(u *url.URL, method string, body []byte) (*graphqlPaging, error) {
	if method != "POST" || !strings.HasSuffix(u.Path, "/graphql") {
		return nil, nil
	}
	var req map[string]any
	if json.Unmarshal(body, &req) != nil {
		return nil, nil
	}
	q, _ := req["query"].(string)
	if q == "" {
		return nil, nil
	}
	if !strings.Contains(q, "$endCursor") {
		return nil, errors.New(`--paginate with GraphQL: the query must take an $endCursor variable and ask for pageInfo { hasNextPage endCursor }, e.g. query($endCursor: String) { viewer { repositories(first: 100, after: $endCursor) { nodes { name } pageInfo { hasNextPage endCursor } } } }`)
	}
	return &graphqlPaging{request: req}, nil
}

// next returns the body of the request for the page after the answer
// data, or nil when data was the last page. An answer with errors and no
// data is an error.
func (g *graphqlPaging) next(data []byte) ([]byte, error) {
	var top struct {
		Data   json.RawMessage `json:"data"`
		Errors []struct {
			Message string `json:"message"`
		} `json:"errors"`
	}
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, err
	}
	if len(top.Errors) > 0 && (len(top.Data) == 0 || string(top.Data) == "null") {
		msgs := make([]string, len(top.Errors))
		for i, e := range top.Errors {
			msgs[i] = e.Message
		}
		return nil, fmt.Errorf("GraphQL: %s", strings.Join(msgs, "; "))
	}
	more, cursor := pageInfo(top.Data)
	if !more || cursor == "" {
		return nil, nil
	}
	vars, _ := g.request["variables"].(map[string]any)
	if vars == nil {
		vars = map[string]any{}
	}
	vars["endCursor"] = cursor
	g.request["variables"] = vars
	return json.Marshal(g.request)
}

// pageInfo finds the first pageInfo object of a GraphQL answer's data, in
// the order of the document (the connection the query's $endCursor pages).
func pageInfo(data []byte) (hasNext bool, endCursor string) {
	pi, err := findPageInfo(json.NewDecoder(bytes.NewReader(data)))
	if err != nil || pi == nil {
		return false, ""
	}
	return pi.HasNextPage, pi.EndCursor
}

type pageInfoValue struct {
	HasNextPage bool   `json:"hasNextPage"`
	EndCursor   string `json:"endCursor"`
}

// findPageInfo reads one JSON value from dec and returns the first
// pageInfo in it, or nil.
func findPageInfo(dec *json.Decoder) (*pageInfoValue, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return nil, nil // a scalar
	}
	for dec.More() {
		if d == '{' {
			key, err := dec.Token()
			if err != nil {
				return nil, err
			}
			if key == "pageInfo" {
				var pi pageInfoValue
				err := dec.Decode(&pi)
				return &pi, err
			}
		}
		if pi, err := findPageInfo(dec); pi != nil || err != nil {
			return pi, err
		}
	}
	_, err = dec.Token() // the closing delimiter
	return nil, err
}
