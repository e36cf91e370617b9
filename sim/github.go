package sim

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// githubDialect speaks the GitHub REST and GraphQL APIs as documented at
// docs.github.com ("Rate limits for the REST API", "Rate limits and query
// limits for the GraphQL API").
type githubDialect struct{}

const (
	ghDocsRest          = "https://docs.github.com/rest"
	ghDocsPrimary       = "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api"
	ghDocsSecondary     = "https://docs.github.com/free-pro-team@latest/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits"
	ghMsgSecondary      = "You have exceeded a secondary rate limit. Please wait a few minutes before you try again."
	ghAnonymousGoodNews = "(But here's the good news: Authenticated requests get a higher rate limit. Check out the documentation for more details.)"
)

// Header values shared by every answer (never modified after creation).
var (
	ghVary          = []string{"Accept, Authorization, Cookie, X-GitHub-OTP, Accept-Encoding"}
	ghCachePrivate  = []string{"private, max-age=60, s-maxage=60"}
	ghCachePublic   = []string{"public, max-age=60, s-maxage=60"}
	ghMediaJSON     = []string{"github.v3; format=json"}
	ghMediaRaw      = []string{"github.v3; param=raw"}
	ghAPIVersion    = []string{"2022-11-28"}
	ghResourceNames [][]string
)

func init() {
	for _, r := range githubSpec.resources {
		ghResourceNames = append(ghResourceNames, []string{r.name})
	}
}

// credential: GitHub also takes a token as the password (or the user
// name) of Basic credentials.
func (githubDialect) credential(r *http.Request) (string, bool) {
	return bearer(r, "token", "Bearer", "Basic")
}

func (githubDialect) headers(c *call, h http.Header) {
	if c.own != nil && !c.own.anonymous {
		h["Cache-Control"] = ghCachePrivate
	} else {
		h["Cache-Control"] = ghCachePublic
	}
	h["Vary"] = ghVary
	if c.ep.variant == "raw" {
		h["X-Github-Media-Type"] = ghMediaRaw
	} else {
		h["X-Github-Media-Type"] = ghMediaJSON
	}
	h["X-Github-Api-Version-Selected"] = ghAPIVersion
	h["X-Github-Request-Id"] = []string{ghRequestID(c)}
	if c.ep.events && c.a.pollInterval > 0 {
		h["X-Poll-Interval"] = []string{itoa(int64(c.a.pollInterval.Seconds()))}
	}
}

// ghRequestID looks like GitHub's X-GitHub-Request-Id (five hex fields).
func ghRequestID(c *call) string {
	n := c.requestID()
	x := splitmix64(c.a.seed ^ n)
	return fmt.Sprintf("%04X:%04X:%06X:%06X:%08X", c.a.index&0xffff, x&0xffff, (x>>16)&0xffffff, n&0xffffff, uint32(c.now.Unix()))
}

func (githubDialect) rateHeaders(c *call, h http.Header, st bucketState) {
	h["X-Ratelimit-Limit"] = []string{itoa(st.limit)}
	h["X-Ratelimit-Remaining"] = []string{itoa(st.remaining)}
	h["X-Ratelimit-Reset"] = []string{itoa(st.reset)}
	h["X-Ratelimit-Used"] = []string{itoa(st.used)}
	h["X-Ratelimit-Resource"] = ghResourceNames[c.ep.res]
}

// etag is GitHub's tag for a request without Accept, Authorization or
// Cookie: the body's hash alone (see tagFor).
func (githubDialect) etag(body []byte) string { return `W/"` + sha256Hex(body) + `"` }

// ghTagHeaders are the request fields api.github.com mixes into its
// entity tags, in order.
var ghTagHeaders = [...]string{"Accept", "Authorization", "Cookie"}

// tagFor is the entity tag api.github.com gives a JSON answer (observed
// and published, not documented): W/" + hex SHA-256 of the request's
// Accept value, ":", its Authorization value, ":", its Cookie value, ":"
// (each only when present) and then the body + ". So a tag stored for
// one token never matches a request made with another, and a client can
// only get a free 304 for another token by computing that token's tag.
// Tags are memoized per answer and request part.
func (githubDialect) tagFor(r *http.Request, rd *rendered) string {
	var prefix []byte
	for _, name := range ghTagHeaders {
		if vs, ok := r.Header[name]; ok {
			prefix = append(prefix, strings.Join(vs, ", ")...)
			prefix = append(prefix, ':')
		}
	}
	if len(prefix) == 0 {
		return rd.etag
	}
	if tag, ok := rd.tags.Load(string(prefix)); ok {
		return tag.(string)
	}
	h := sha256.New()
	h.Write(prefix)
	h.Write(rd.body)
	tag := `W/"` + hex.EncodeToString(h.Sum(nil)) + `"`
	rd.tags.Store(string(prefix), tag)
	return tag
}

// ghError is GitHub's error body.
func ghError(status int, message, docs string) *rendered {
	return jsonBody(status, struct {
		Message string `json:"message"`
		Docs    string `json:"documentation_url"`
		Status  string `json:"status"`
	}{message, docs, strconv.Itoa(status)})
}

func (githubDialect) unauthorized(c *call, missing bool) *rendered {
	switch {
	case !missing:
		return ghError(http.StatusUnauthorized, "Bad credentials", ghDocsRest)
	case c.ep.res == 3: // graphql
		return ghError(http.StatusUnauthorized, "This endpoint requires you to be authenticated.", "https://docs.github.com/graphql/guides/forming-calls-with-graphql#authenticating-with-graphql")
	default:
		return ghError(http.StatusUnauthorized, "Requires authentication", ghDocsRest)
	}
}

// supportSuffix is what GitHub appends to rate-limit messages.
func supportSuffix(c *call, withTime bool) string {
	id := ghRequestID(c)
	if withTime {
		return fmt.Sprintf(" If you reach out to GitHub Support for help, please include the request ID %s and timestamp %s UTC.", id, c.now.UTC().Format("2006-01-02 15:04:05"))
	}
	return fmt.Sprintf(" If you reach out to GitHub Support for help, please include the request ID %s.", id)
}

func (githubDialect) exhausted(c *call, _ bucketState) *rendered {
	who := fmt.Sprintf("user ID %d.", c.own.id)
	if c.own.anonymous {
		who = c.own.name + ". " + ghAnonymousGoodNews
	}
	if c.ep.res == 3 {
		// GraphQL answers 200 with an error (documented).
		return jsonBody(http.StatusOK, map[string]any{"errors": []map[string]any{{
			"type": "RATE_LIMITED", "code": "graphql_rate_limit",
			"message": "API rate limit already exceeded for " + who,
		}}})
	}
	return ghError(c.a.exhaustedStatus, "API rate limit exceeded for "+who+supportSuffix(c, true), ghDocsPrimary)
}

func (githubDialect) secondaryRefusal(c *call, status int) *rendered {
	return ghError(status, ghMsgSecondary+supportSuffix(c, false), ghDocsSecondary)
}

// endpointRefused: GitHub's unpublished limits refuse as its secondary
// limits do.
func (d githubDialect) endpointRefused(c *call) *rendered {
	return d.secondaryRefusal(c, http.StatusTooManyRequests)
}

func (d githubDialect) throttleHeaders(c *call, h http.Header, st bucketState, _ string) {
	d.rateHeaders(c, h, st)
}

func ghNotFound(*call) *rendered {
	return ghError(http.StatusNotFound, "Not Found", ghDocsRest)
}

func (githubDialect) route(c *call) endpoint {
	s, m := c.segs, c.r.Method
	get := m == http.MethodGet || m == http.MethodHead
	notFound := endpoint{static: ghNotFound, write: !get && m != http.MethodOptions}
	switch {
	case len(s) == 1 && s[0] == "rate_limit" && get:
		return endpoint{free: true, dynamic: ghRateLimit}
	case len(s) == 1 && s[0] == "user" && get:
		return endpoint{needsAuth: true, ownerDependent: true, static: ghAuthenticatedUser}
	case len(s) == 1 && s[0] == "events" && get:
		return endpoint{events: true, static: ghEvents}
	case len(s) == 2 && s[0] == "users" && get:
		return endpoint{static: ghPublicUser}
	case len(s) == 3 && s[0] == "users" && s[2] == "events" && get:
		return endpoint{events: true, static: ghEvents}
	case len(s) == 1 && s[0] == "graphql" && m == http.MethodPost:
		return ghGraphQLEndpoint(c)
	case len(s) == 2 && s[0] == "search" && get:
		switch s[1] {
		case "code":
			return endpoint{res: 2, static: ghSearch}
		case "repositories", "issues", "users", "commits", "topics", "labels":
			return endpoint{res: 1, static: ghSearch}
		}
		return endpoint{res: 1, static: ghNotFound}
	case len(s) >= 3 && s[0] == "repos":
		switch {
		case len(s) == 3 && get:
			return endpoint{static: ghRepo}
		case len(s) == 4 && s[3] == "readme" && get:
			if ghWantsRaw(c.r.Header.Get("Accept")) {
				return endpoint{static: ghReadme, variant: "raw"}
			}
			return endpoint{static: ghReadme}
		case len(s) == 4 && s[3] == "issues" && get:
			return endpoint{static: ghIssues}
		case len(s) == 4 && s[3] == "issues" && m == http.MethodPost:
			return endpoint{write: true, dynamic: ghCreateIssue, bumps: []string{c.relKey(), "/repos/" + url.PathEscape(s[1]) + "/" + url.PathEscape(s[2]) + "/events"}}
		case len(s) == 4 && s[3] == "events" && get:
			return endpoint{events: true, static: ghEvents}
		}
	}
	return notFound
}

func ghWantsRaw(accept string) bool {
	return strings.Contains(accept, "application/vnd.github.raw") || strings.Contains(accept, "application/vnd.github.v3.raw")
}

// ownerID is the ID of a login: a configured owner's, or one derived from it.
func (a *api) ownerID(login string) int64 {
	for _, o := range a.owners {
		if o.name == login {
			return o.id
		}
	}
	return derivedID(login)
}

func ghUserJSON(c *call, login string, id int64) map[string]any {
	return map[string]any{
		"login":      login,
		"id":         id,
		"node_id":    "U_kgDO" + hexID(uint64(id), 6),
		"avatar_url": fmt.Sprintf("https://avatars.githubusercontent.com/u/%d?v=4", id),
		"url":        c.base() + "/users/" + url.PathEscape(login),
		"html_url":   "https://github.com/" + login,
		"events_url": c.base() + "/users/" + url.PathEscape(login) + "/events{/privacy}",
		"type":       "User",
		"site_admin": false,
	}
}

func ghPublicUser(c *call) *rendered {
	login := c.segs[1]
	u := ghUserJSON(c, login, c.a.ownerID(login))
	h := seedOf("user", login)
	u["name"] = capitalize(login)
	u["public_repos"] = h % 200
	u["followers"] = (h >> 8) % 5000
	u["following"] = (h >> 20) % 300
	u["created_at"] = isoTime(stamp(h))
	u["updated_at"] = isoTime(stamp(h).Add(30 * 24 * time.Hour))
	return jsonBody(http.StatusOK, u)
}

func ghAuthenticatedUser(c *call) *rendered {
	u := ghUserJSON(c, c.own.name, c.own.id)
	h := seedOf("user", c.own.name)
	u["name"] = c.own.name
	u["public_repos"] = h % 200
	u["followers"] = (h >> 8) % 5000
	u["created_at"] = isoTime(stamp(h))
	u["plan"] = map[string]any{"name": "free", "space": 976562499, "private_repos": 10000, "collaborators": 0}
	return jsonBody(http.StatusOK, u)
}

func ghRepoJSON(c *call, o, r string, version uint64) map[string]any {
	h := seedOf("repo", o, r)
	created := stamp(h)
	full := o + "/" + r
	repoURL := c.base() + "/repos/" + url.PathEscape(o) + "/" + url.PathEscape(r)
	return map[string]any{
		"id":                int64(h % 900_000_000),
		"node_id":           "R_kgDO" + hexID(h, 6),
		"name":              r,
		"full_name":         full,
		"private":           false,
		"owner":             ghUserJSON(c, o, c.a.ownerID(o)),
		"html_url":          "https://github.com/" + full,
		"description":       capitalize(phrase(h, 5)),
		"fork":              false,
		"url":               repoURL,
		"issues_url":        repoURL + "/issues{/number}",
		"events_url":        repoURL + "/events",
		"created_at":        isoTime(created),
		"updated_at":        isoTime(created.Add(ghHours(h%5000 + version))),
		"pushed_at":         isoTime(created.Add(ghHours(h%5000 + version))),
		"size":              h % 100_000,
		"stargazers_count":  (h >> 10) % 20_000,
		"watchers_count":    (h >> 10) % 20_000,
		"language":          languages[(h>>30)%uint64(len(languages))],
		"forks_count":       (h >> 40) % 2_000,
		"open_issues_count": ghIssueTotal(o, r, 0),
		"default_branch":    "main",
		"visibility":        "public",
		"topics":            []string{},
	}
}

func ghRepo(c *call) *rendered {
	return jsonBody(http.StatusOK, ghRepoJSON(c, c.segs[1], c.segs[2], c.version()))
}

func ghReadme(c *call) *rendered {
	o, r := c.segs[1], c.segs[2]
	text := []byte(readme(o, r, c.version()))
	if c.ep.variant == "raw" {
		return newRendered(http.StatusOK, ctText, text)
	}
	sha := hexID(seedOf("readme", o, r, itoa(int64(c.version()))), 40)
	self := c.base() + "/repos/" + url.PathEscape(o) + "/" + url.PathEscape(r) + "/contents/README.md"
	return jsonBody(http.StatusOK, map[string]any{
		"type": "file", "encoding": "base64", "size": len(text), "name": "README.md", "path": "README.md",
		"content": base64Lines(text), "sha": sha, "url": self + "?ref=main",
		"html_url":     "https://github.com/" + o + "/" + r + "/blob/main/README.md",
		"download_url": "https://raw.githubusercontent.com/" + o + "/" + r + "/main/README.md",
		"_links":       map[string]string{"self": self + "?ref=main", "html": "https://github.com/" + o + "/" + r + "/blob/main/README.md"},
	})
}

func ghHours(n uint64) time.Duration { return time.Duration(n) * time.Hour }

// ghIssueTotal is how many issues a repository has after version writes.
func ghIssueTotal(o, r string, version uint64) int {
	return int(5+seedOf("issues", o, r)%120) + int(version)
}

func ghIssueJSON(c *call, o, r string, number int) map[string]any {
	h := seedOf("issue", o, r, strconv.Itoa(number))
	created := stamp(seedOf("repo", o, r)).Add(ghHours(uint64(number) * 7))
	author := "user" + strconv.Itoa(int(h%50)+1)
	repoURL := c.base() + "/repos/" + url.PathEscape(o) + "/" + url.PathEscape(r)
	state := "open"
	if h%4 == 0 {
		state = "closed"
	}
	return map[string]any{
		"id":         int64(h % 3_000_000_000),
		"node_id":    "I_kwDO" + hexID(h, 10),
		"number":     number,
		"title":      capitalize(phrase(h, 6)),
		"user":       ghUserJSON(c, author, c.a.ownerID(author)),
		"state":      state,
		"labels":     []any{},
		"comments":   h % 30,
		"created_at": isoTime(created),
		"updated_at": isoTime(created.Add(ghHours(h % 100))),
		"url":        repoURL + "/issues/" + strconv.Itoa(number),
		"html_url":   "https://github.com/" + o + "/" + r + "/issues/" + strconv.Itoa(number),
		"body":       phrase(h>>7, 12) + ".",
	}
}

func ghIssues(c *call) *rendered {
	o, r := c.segs[1], c.segs[2]
	return newestFirst(c, "per_page", 100, ghIssueTotal(o, r, c.version()), func(n int) map[string]any { return ghIssueJSON(c, o, r, n) })
}

func ghCreateIssue(c *call, _ bucketState) *rendered {
	o, r := c.segs[1], c.segs[2]
	title, body, ok := issueInput(c)
	if !ok {
		return ghError(http.StatusBadRequest, "Problems parsing JSON", "https://docs.github.com/rest/issues/issues#create-an-issue")
	}
	if title == "" {
		return ghError(http.StatusUnprocessableEntity, "Invalid request.\n\n\"title\" wasn't supplied.", "https://docs.github.com/rest/issues/issues#create-an-issue")
	}
	issue := ghIssueJSON(c, o, r, ghIssueTotal(o, r, c.version())+1)
	issue["state"] = "open"
	return jsonBody(http.StatusCreated, created(c, issue, ghUserJSON(c, c.own.name, c.own.id), title, body)).with("Location", issue["url"].(string))
}

var ghEventTypes = []string{"PushEvent", "IssuesEvent", "WatchEvent", "CreateEvent", "IssueCommentEvent", "PullRequestEvent", "ForkEvent"}

// ghEvents serves /events, /users/{u}/events and /repos/{o}/{r}/events:
// newest first, at most 300 events, 30 a page by default.
func ghEvents(c *call) *rendered {
	scope := strings.Join(c.segs, "/")
	h0 := seedOf("events", scope)
	total := 20 + int(c.version())
	listed := min(total, 300)
	q := c.r.URL.Query()
	p := paginate(q, "page", "per_page", 30, 100, listed)
	items := make([]map[string]any, 0, max(p.last-p.first+1, 0))
	for i := p.first; i <= p.last; i++ {
		k := total - i + 1
		h := seedOf("event", scope, strconv.Itoa(k))
		actor := "user" + strconv.Itoa(int(h%50)+1)
		o, r := actor, "project-"+strconv.Itoa(int(h>>8)%20)
		if len(c.segs) == 4 {
			o, r = c.segs[1], c.segs[2]
		} else if len(c.segs) == 3 {
			actor = c.segs[1]
		}
		items = append(items, map[string]any{
			"id":    strconv.FormatUint(30_000_000_000+h0%1_000_000_000+uint64(k), 10),
			"type":  ghEventTypes[h%uint64(len(ghEventTypes))],
			"actor": map[string]any{"id": c.a.ownerID(actor), "login": actor, "display_login": actor, "url": c.base() + "/users/" + url.PathEscape(actor)},
			"repo": map[string]any{"id": int64(seedOf("repo", o, r) % 900_000_000), "name": o + "/" + r,
				"url": c.base() + "/repos/" + url.PathEscape(o) + "/" + url.PathEscape(r)},
			"payload":    map[string]any{},
			"public":     true,
			"created_at": isoTime(stamp(h0).Add(time.Duration(k) * time.Minute)),
		})
	}
	rd := jsonBody(http.StatusOK, items)
	if link := linkHeader(c.base(), c.rel, q, "page", "per_page", p); link != "" {
		rd.with("Link", link)
	}
	return rd
}

// ghSearch answers the search endpoints: GitHub serves at most 1,000
// results of any search.
func ghSearch(c *call) *rendered {
	kind := c.segs[1]
	q := c.r.URL.Query()
	term := q.Get("q")
	if term == "" {
		return jsonBody(http.StatusUnprocessableEntity, map[string]any{
			"message": "Validation Failed", "errors": []map[string]string{{"resource": "Search", "field": "q", "code": "missing"}},
			"documentation_url": "https://docs.github.com/v3/search", "status": "422",
		})
	}
	h := seedOf("search", kind, term)
	total := int(h % 5000)
	p := paginate(q, "page", "per_page", 30, 100, min(total, 1000))
	items := make([]map[string]any, 0, max(p.last-p.first+1, 0))
	for i := p.first; i <= p.last; i++ {
		hi := seedOf("hit", kind, term, strconv.Itoa(i))
		o := "user" + strconv.Itoa(int(hi%50)+1)
		r := strings.ReplaceAll(phrase(hi, 2), " ", "-")
		switch kind {
		case "code":
			items = append(items, map[string]any{
				"name": "main.go", "path": "cmd/" + r + "/main.go", "sha": hexID(hi, 40), "score": 1.0,
				"url":        c.base() + "/repos/" + o + "/" + r + "/contents/cmd/" + r + "/main.go?ref=main",
				"repository": ghRepoJSON(c, o, r, 0),
			})
		case "users":
			u := ghUserJSON(c, o, c.a.ownerID(o))
			u["score"] = 1.0
			items = append(items, u)
		case "issues":
			it := ghIssueJSON(c, o, r, int(hi%500)+1)
			it["score"] = 1.0
			items = append(items, it)
		default:
			repo := ghRepoJSON(c, o, r, 0)
			repo["score"] = 1.0
			items = append(items, repo)
		}
	}
	rd := jsonBody(http.StatusOK, map[string]any{"total_count": total, "incomplete_results": false, "items": items})
	if link := linkHeader(c.base(), c.rel, q, "page", "per_page", p); link != "" {
		rd.with("Link", link)
	}
	return rd
}

// ghRateLimit is GET /rate_limit: free, and reporting every resource.
func ghRateLimit(c *call, core bucketState) *rendered {
	resources := map[string]any{}
	for i, b := range c.own.buckets {
		st := core
		if i != 0 {
			st = b.peek(c.now)
		}
		resources[c.a.res[i].name] = map[string]int64{"limit": st.limit, "used": st.used, "remaining": st.remaining, "reset": st.reset}
	}
	return jsonBody(http.StatusOK, map[string]any{"resources": resources, "rate": resources["core"]})
}
