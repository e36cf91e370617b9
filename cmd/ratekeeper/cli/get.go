package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ratekeeper/ratekeeper/transport"
)

func init() { register(newGetCmd) }

type getOptions struct {
	client   clientFlags
	method   string
	headers  []string
	data     string
	output   string
	paginate bool
}

func newGetCmd() *cobra.Command {
	var o getOptions
	cmd := &cobra.Command{
		Use:   "get URL",
		Short: "Send one request (curl-like) through the rate-keeping client",
		Long: `get sends a request through ratekeeper's client: it picks the credential that
can go soonest, waits for quota if it must, answers a repeated GET with a free
conditional request, retries what is safe to retry, and prints the body.

Tokens come from the provider's environment variables (GITHUB_TOKEN, GH_TOKEN,
GITLAB_TOKEN, HF_TOKEN, CODEBERG_TOKEN, …), several separated by commas.
--paginate follows Link: rel="next" (GitHub, GitLab, Gitea) and joins the pages'
JSON arrays into one array, as 'gh api --paginate' does. For a GraphQL query
(POST to .../graphql with -d '{"query": …}') it follows the first
pageInfo { hasNextPage endCursor } of each answer through the query's
$endCursor variable, as 'gh api graphql --paginate' does, and prints each
page's JSON on its own line. A GraphQL query reserves its cost in points
(see README).
The exit status is 1 when the final response is an HTTP error (4xx, 5xx).`,
		Example: `  ratekeeper get https://api.github.com/repos/golang/go
  ratekeeper get --paginate https://api.github.com/repos/golang/go/issues?per_page=100 -o issues.json
  ratekeeper get -X POST -d '{"title":"hi"}' https://api.github.com/repos/o/r/issues -v
  ratekeeper get --paginate -d '{"query":"query($endCursor: String) { viewer { repositories(first: 100, after: $endCursor) { nodes { name } pageInfo { hasNextPage endCursor } } } }"}' https://api.github.com/graphql`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return runGet(cmd, &o, args[0]) },
	}
	o.client.add(cmd)
	fl := cmd.Flags()
	fl.StringVarP(&o.method, "request", "X", "", "HTTP method (default GET, or POST with -d)")
	fl.StringArrayVarP(&o.headers, "header", "H", nil, "request header 'Name: value' (repeatable)")
	fl.StringVarP(&o.data, "data", "d", "", "request body; @FILE reads it from a file, @- from stdin")
	fl.StringVarP(&o.output, "output", "o", "", "write the body to FILE instead of stdout")
	fl.BoolVar(&o.paginate, "paginate", false, `follow Link: rel="next" and join JSON arrays`)
	return cmd
}

func runGet(cmd *cobra.Command, o *getOptions, rawURL string) error {
	rq, err := o.request(cmd.InOrStdin(), rawURL)
	if err != nil {
		return err
	}
	stderr := cmd.ErrOrStderr()
	t, err := o.client.transport(stderr)
	if err != nil {
		return err
	}
	defer t.Close()
	if t.Registry().Match(rq.url) == nil && o.client.verbose {
		fmt.Fprintf(stderr, "ratekeeper: no configured provider owns %s; sending it without a credential or pacing\n", rq.url.Host)
	}
	client := &http.Client{Transport: t}

	out, closeOut, err := o.createOutput(cmd.OutOrStdout())
	if err != nil {
		return err
	}
	defer closeOut()

	gql, err := newGraphQLPaging(rq.url, rq.method, rq.body)
	if err != nil && o.paginate {
		return exitf(2, "%v", err)
	}
	return o.send(cmd.Context(), client, rq, gql, out, stderr)
}

// getRequest is the first request get sends, as the flags describe it.
type getRequest struct {
	url    *url.URL
	method string
	body   []byte // nil without --data
	header http.Header
}

// request reads the URL, --request, --data and --header into the first
// request; a bad one is an input error (exit status 2).
func (o *getOptions) request(stdin io.Reader, rawURL string) (getRequest, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return getRequest{}, exitf(2, "%q is not an http(s) URL such as https://api.github.com/user", rawURL)
	}
	rq := getRequest{url: u, method: strings.ToUpper(o.method), header: http.Header{}}
	if o.data != "" {
		rq.body, err = readData(stdin, o.data)
		if err != nil {
			return getRequest{}, exitf(2, "--data: %v", err)
		}
		if rq.method == "" {
			rq.method = http.MethodPost
		}
	}
	if rq.method == "" {
		rq.method = http.MethodGet
	}
	for _, h := range o.headers {
		k, v, ok := strings.Cut(h, ":")
		if !ok || strings.TrimSpace(k) == "" {
			return getRequest{}, exitf(2, "--header %q: want 'Name: value'", h)
		}
		rq.header.Add(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	return rq, nil
}

// createOutput opens --output, or gives stdout; the closer is to be
// deferred either way.
func (o *getOptions) createOutput(stdout io.Writer) (io.Writer, func(), error) {
	if o.output == "" {
		return stdout, func() {}, nil
	}
	f, err := os.Create(o.output)
	if err != nil {
		return nil, nil, exitf(1, "--output: %v", err)
	}
	return f, func() { f.Close() }, nil
}

// send sends the request and writes the body to out. With --paginate it
// follows each page (by Link: rel="next", or gql's cursor) and writes the
// pages together at the end; an HTTP error stops it with that page's body
// written as it came.
func (o *getOptions) send(ctx context.Context, client *http.Client, rq getRequest, gql *graphqlPaging, out, stderr io.Writer) error {
	var pages []json.RawMessage
	allArrays := true
	method, body, next := rq.method, rq.body, rq.url.String()
	for next != "" {
		resp, err := o.do(ctx, client, method, next, body, rq.header, stderr)
		if err != nil {
			return err
		}
		if !o.paginate || resp.StatusCode >= 400 {
			return copyAnswer(out, resp, method, next)
		}
		data, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return exitf(1, "reading the response: %v", err)
		}
		if !json.Valid(data) {
			return exitf(1, "--paginate: page %d of %s is not JSON", len(pages)+1, redact(rq.url.String()))
		}
		allArrays = allArrays && bytes.HasPrefix(bytes.TrimSpace(data), []byte("["))
		pages = append(pages, data)
		if gql != nil {
			// The same query again with $endCursor after this page.
			if body, err = gql.next(data); err != nil {
				return exitf(1, "--paginate: page %d: %v", len(pages), err)
			}
			if body == nil {
				next = ""
			}
			continue
		}
		next = nextLink(resp.Header, resp.Request.URL)
		method, body = http.MethodGet, nil
	}
	return writePages(out, pages, allArrays)
}

// do sends one request to target, telling it on stderr with --verbose.
// A failure is returned as the exit error to print, with any credential
// in its URL masked.
func (o *getOptions) do(ctx context.Context, client *http.Client, method, target string, body []byte, header http.Header, stderr io.Writer) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, target, bytes.NewReader(body))
	if err != nil {
		return nil, exitf(2, "%v", err)
	}
	req.Header = header.Clone()
	if body == nil {
		req.Body, req.GetBody, req.ContentLength = nil, nil, 0
	}
	resp, err := client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			// http.Client masks a password in the URL, not a
			// token given as the user name.
			ue.URL = redact(ue.URL)
		}
		var we *transport.WaitError
		if errors.As(err, &we) {
			return nil, exitf(1, "%v", we)
		}
		return nil, exitf(1, "%v", err)
	}
	if o.client.verbose {
		fmt.Fprintf(stderr, "ratekeeper: %s %s → %s via %s%s\n", method, redact(target), resp.Status,
			resp.Header.Get(transport.HeaderCredential), cacheNote(resp))
	}
	return resp, nil
}

// copyAnswer writes a response's body to out as it came; an HTTP error
// status is the command's failure.
func copyAnswer(out io.Writer, resp *http.Response, method, target string) error {
	_, err := io.Copy(out, resp.Body)
	resp.Body.Close()
	if err != nil {
		return exitf(1, "reading the response: %v", err)
	}
	if resp.StatusCode >= 400 {
		return exitf(1, "%s %s: %s", method, redact(target), resp.Status)
	}
	return nil
}

// writePages joins the pages' arrays into one array, or, when some page
// is not an array, writes each page on its own line.
func writePages(out io.Writer, pages []json.RawMessage, allArrays bool) error {
	if !allArrays {
		for _, p := range pages {
			if _, err := fmt.Fprintf(out, "%s\n", bytes.TrimSpace(p)); err != nil {
				return err
			}
		}
		return nil
	}
	var all []json.RawMessage
	for _, p := range pages {
		var items []json.RawMessage
		if err := json.Unmarshal(p, &items); err != nil {
			return exitf(1, "--paginate: %v", err)
		}
		all = append(all, items...)
	}
	if all == nil {
		all = []json.RawMessage{}
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(all)
}

// nextLink finds the rel="next" target of a Link header (RFC 8288), made
// absolute against base.
func nextLink(h http.Header, base *url.URL) string {
	for _, v := range h.Values("Link") {
		for _, part := range splitLinks(v) {
			target, params, ok := strings.Cut(part, ";")
			if !ok {
				continue
			}
			target = strings.TrimSpace(target)
			if !strings.HasPrefix(target, "<") || !strings.HasSuffix(target, ">") {
				continue
			}
			for _, p := range strings.Split(params, ";") {
				k, val, _ := strings.Cut(strings.TrimSpace(p), "=")
				if strings.EqualFold(strings.TrimSpace(k), "rel") {
					for _, rel := range strings.Fields(strings.Trim(strings.TrimSpace(val), `"`)) {
						if strings.EqualFold(rel, "next") {
							ref, err := url.Parse(target[1 : len(target)-1])
							if err != nil {
								return ""
							}
							return base.ResolveReference(ref).String()
						}
					}
				}
			}
		}
	}
	return ""
}

// splitLinks splits a Link header at the commas between links (not those
// inside <...>).
func splitLinks(v string) []string {
	var parts []string
	depth, start := 0, 0
	for i := 0; i < len(v); i++ {
		switch v[i] {
		case '<':
			depth++
		case '>':
			depth--
		case ',':
			if depth == 0 {
				parts = append(parts, v[start:i])
				start = i + 1
			}
		}
	}
	return append(parts, v[start:])
}

func readData(stdin io.Reader, data string) ([]byte, error) {
	switch {
	case data == "@-":
		return io.ReadAll(stdin)
	case strings.HasPrefix(data, "@"):
		return os.ReadFile(data[1:])
	}
	return []byte(data), nil
}

func cacheNote(resp *http.Response) string {
	if c := resp.Header.Get(transport.HeaderCache); c != "" {
		return " (cache: " + c + ")"
	}
	return ""
}

// redact drops a URL's query (it may carry keys) and user info for
// messages.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "<url>"
	}
	u.User = nil
	if u.RawQuery != "" {
		u.RawQuery = "…"
	}
	return u.String()
}
