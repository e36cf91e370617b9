package fetch

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/ratekeeper/ratekeeper/tasks"
)

// Pagination follows what a listing's answer says comes next, as gh api
// --paginate does:
//
//   - a GraphQL request whose query declares $endCursor: the first pageInfo
//     object of the answer, in document order, with hasNextPage true gives
//     its endCursor, and the next page is the same request with
//     variables.endCursor set to it;
//   - any other request: the Link header's rel="next" (GitHub, GitLab,
//     Gitea), else GitLab's X-Next-Page, a page number put in the URL's
//     page parameter.
//
// A next URL on another scheme, host or port than the page's is not
// followed: the credentials the page was fetched with must not go there.

// paginatesByCursor reports whether in is a GraphQL request that pages by
// $endCursor.
func paginatesByCursor(in tasks.HTTPInput) bool {
	if in.Body == "" || !strings.Contains(in.Body, "$endCursor") {
		return false
	}
	var body struct {
		Query string `json:"query"`
	}
	return json.Unmarshal([]byte(in.Body), &body) == nil && strings.Contains(body.Query, "$endCursor")
}

// nextPage says what follows the answer res to the page request in, or
// nil after the last page. An error says why a next page that the answer
// names is not followed.
func nextPage(in tasks.HTTPInput, res *tasks.HTTPResult) (*NextPage, error) {
	if paginatesByCursor(in) {
		body, err := resultBody(res)
		if err != nil {
			return nil, fmt.Errorf("read the page to find its pageInfo: %w", err)
		}
		cursor, ok := endCursor(body)
		if !ok {
			if msg, bad := graphQLError(body); bad {
				return nil, fmt.Errorf("the answer holds GraphQL errors and no next page (%s): the listing may be cut short here", shorten(msg))
			}
			return nil, nil
		}
		if cursor == currentCursor(in) {
			return nil, fmt.Errorf("the answer's pageInfo names endCursor %q again, the cursor this page was asked for with; not followed, as it would repeat this page forever", shorten(cursor))
		}
		return &NextPage{Cursor: cursor}, nil
	}
	next, ok, err := restNext(in.URL, res.Headers)
	if err != nil || !ok {
		return nil, err
	}
	return &NextPage{URL: next}, nil
}

// restNext finds the next page's URL of a REST listing answer to pageURL:
// Link rel="next" (resolved against pageURL), else X-Next-Page.
func restNext(pageURL string, h http.Header) (string, bool, error) {
	base, err := url.Parse(pageURL)
	if err != nil {
		return "", false, err
	}
	var next *url.URL
	if link, ok := linkNext(h.Values("Link")); ok {
		u, err := base.Parse(link)
		if err != nil {
			return "", false, nil // a malformed header is ignored
		}
		next = u
	} else if n := strings.TrimSpace(h.Get("X-Next-Page")); n != "" {
		u := *base
		q := u.Query()
		q.Set("page", n)
		u.RawQuery = q.Encode()
		next = &u
	} else {
		return "", false, nil
	}
	if next.Scheme != base.Scheme || next.Host != base.Host {
		return "", false, fmt.Errorf("the next page, %s, is on another host than %s; not followed, so that no credential goes there", printable(next), base.Scheme+"://"+base.Host)
	}
	return next.String(), true, nil
}

// printable is u without user information and query, which may hold
// secrets.
func printable(u *url.URL) string { return u.Scheme + "://" + u.Host + u.EscapedPath() }

// linkNext returns the target of the first rel="next" link of Link
// header values (RFC 8288); relation names are case-insensitive and rel
// may list several.
func linkNext(values []string) (string, bool) {
	for _, v := range values {
		for v != "" {
			v = strings.TrimLeft(v, " \t,")
			if !strings.HasPrefix(v, "<") {
				break
			}
			end := strings.IndexByte(v, '>')
			if end < 0 {
				break
			}
			target := v[1:end]
			v = v[end+1:]
			// Parameters run to the next link: a comma outside quotes.
			params, rest := splitLinkParams(v)
			v = rest
			for _, p := range params {
				name, val, _ := strings.Cut(p, "=")
				if !strings.EqualFold(strings.TrimSpace(name), "rel") {
					continue
				}
				for _, rel := range strings.Fields(strings.Trim(strings.TrimSpace(val), `"`)) {
					if strings.EqualFold(rel, "next") {
						return target, true
					}
				}
			}
		}
	}
	return "", false
}

// splitLinkParams splits the parameters of one link (";a=b;c="d,e"")
// from the links after it.
func splitLinkParams(v string) (params []string, rest string) {
	inQuote, start := false, 0
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c == '"':
			inQuote = !inQuote
		case c == ';' && !inQuote:
			if p := strings.TrimSpace(v[start:i]); p != "" {
				params = append(params, p)
			}
			start = i + 1
		case c == ',' && !inQuote:
			if p := strings.TrimSpace(v[start:i]); p != "" {
				params = append(params, p)
			}
			return params, v[i+1:]
		}
	}
	if p := strings.TrimSpace(v[start:]); p != "" {
		params = append(params, p)
	}
	return params, ""
}

// endCursor finds, as gh does, the first object named pageInfo in body
// (in document order) holding both hasNextPage and endCursor, and returns
// its endCursor when hasNextPage is true.
func endCursor(body []byte) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	var (
		open               []json.Delim // the objects and arrays being read
		count              []int        // per level: tokens read in it
		key                []string     // per level: the key of the value being read
		cursor             string
		hasNext            bool
		sawCursor, sawNext bool
	)
	// inPageInfo: the value being read is a member of an object that is
	// the value of a key "pageInfo".
	inPageInfo := func() bool {
		n := len(open)
		return n >= 2 && open[n-1] == '{' && key[n-2] == "pageInfo"
	}
	for {
		tok, err := dec.Token()
		if err != nil {
			return "", false
		}
		n := len(open)
		isKey := n > 0 && open[n-1] == '{' && count[n-1]%2 == 0
		if n > 0 {
			count[n-1]++
		}
		switch t := tok.(type) {
		case json.Delim:
			if t == '{' || t == '[' {
				open, count, key = append(open, t), append(count, 0), append(key, "")
				continue
			}
			if inPageInfo() {
				if sawCursor && sawNext {
					if !hasNext || cursor == "" {
						return "", false
					}
					return cursor, true
				}
				sawCursor, sawNext = false, false
			}
			open, count, key = open[:n-1], count[:n-1], key[:n-1]
		case string:
			switch {
			case isKey:
				key[n-1] = t
			case inPageInfo() && key[n-1] == "endCursor":
				cursor, sawCursor = t, true
			}
		case bool:
			if inPageInfo() && key[n-1] == "hasNextPage" {
				hasNext, sawNext = t, true
			}
		}
	}
}

// graphQLError reports whether a GraphQL answer holds errors, and the
// first one's message.
func graphQLError(body []byte) (string, bool) {
	var ans struct {
		Errors []struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"errors"`
	}
	if json.Unmarshal(body, &ans) != nil || len(ans.Errors) == 0 {
		return "", false
	}
	e := ans.Errors[0]
	if e.Type != "" {
		return e.Type + ": " + e.Message, true
	}
	return e.Message, true
}

// currentCursor is variables.endCursor of a GraphQL request, or "".
func currentCursor(in tasks.HTTPInput) string {
	var body struct {
		Variables map[string]any `json:"variables"`
	}
	if json.Unmarshal([]byte(in.Body), &body) != nil {
		return ""
	}
	s, _ := body.Variables["endCursor"].(string)
	return s
}

// pageRequest is the request of the page next names, after a page of
// base's listing.
func pageRequest(base tasks.HTTPInput, next NextPage) (tasks.HTTPInput, error) {
	in := base
	in.Previous = nil
	if next.URL != "" {
		in.URL = next.URL
		return in, nil
	}
	var body map[string]json.RawMessage
	if err := json.Unmarshal([]byte(base.Body), &body); err != nil {
		return in, fmt.Errorf("the GraphQL request's body is not a JSON object: %w", err)
	}
	vars := map[string]json.RawMessage{}
	if v, ok := body["variables"]; ok && !isNull(v) {
		if err := json.Unmarshal(v, &vars); err != nil {
			return in, fmt.Errorf("the GraphQL request's variables are not an object: %w", err)
		}
	}
	c, _ := json.Marshal(next.Cursor)
	vars["endCursor"] = c
	v, _ := json.Marshal(vars)
	body["variables"] = v
	b, err := json.Marshal(body)
	if err != nil {
		return in, err
	}
	in.Body = string(b)
	return in, nil
}

// resultBody returns a completed http task's body, inline or from its
// file.
func resultBody(res *tasks.HTTPResult) ([]byte, error) {
	if res.Body != nil {
		return []byte(*res.Body), nil
	}
	if res.BodyFile == "" {
		return nil, errors.New("the result has no body")
	}
	f, err := os.Open(res.BodyFile)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}
