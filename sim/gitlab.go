package sim

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// gitlabDialect speaks GitLab's REST API v4 with the headers of its
// Rack::Attack throttles (GitLab docs "User and IP rate limits", and
// Gitlab::RackAttack.throttled_response_headers).
type gitlabDialect struct{}

var (
	glCache    = []string{"max-age=0, private, must-revalidate"}
	glVary     = []string{"Origin, Accept-Encoding"}
	glNosniff  = []string{"nosniff"}
	glNameAuth = []string{"throttle_authenticated_api"}
	glNameAnon = []string{"throttle_unauthenticated_api"}
)

func (gitlabDialect) credential(r *http.Request) (string, bool) {
	if t := r.Header.Get("Private-Token"); t != "" {
		return t, true
	}
	if t, ok := bearer(r, "Bearer"); ok {
		return t, true
	}
	return queryToken(r, "private_token", "access_token")
}

func (gitlabDialect) headers(c *call, h http.Header) {
	h["Cache-Control"] = glCache
	h["Vary"] = glVary
	h["X-Content-Type-Options"] = glNosniff
	x := splitmix64(c.a.seed ^ c.requestID())
	h["X-Request-Id"] = []string{strings.ToUpper(strconv.FormatUint(x|1<<63, 32))[:13] + strings.ToUpper(strconv.FormatUint(splitmix64(x)|1<<63, 32))[:13]}
}

// rateHeaders writes what Rack::Attack reports: RateLimit-Limit is the
// limit scaled to a 60-second period (rounded up), Observed and Remaining
// are counts of the real period, Reset is its end in Unix seconds.
func (gitlabDialect) rateHeaders(c *call, h http.Header, st bucketState) {
	if c.own == nil || c.own.anonymous {
		h["Ratelimit-Name"] = glNameAnon
	} else {
		h["Ratelimit-Name"] = glNameAuth
	}
	perMinute := (st.limit*60 + st.window - 1) / st.window
	h["Ratelimit-Limit"] = []string{itoa(perMinute)}
	h["Ratelimit-Observed"] = []string{itoa(st.used)}
	h["Ratelimit-Remaining"] = []string{itoa(st.remaining)}
	h["Ratelimit-Reset"] = []string{itoa(st.reset)}
}

func (gitlabDialect) etag(body []byte) string { return `W/"` + sha256Hex(body)[:32] + `"` }

func (gitlabDialect) tagFor(_ *http.Request, rd *rendered) string { return rd.etag }

func (gitlabDialect) unauthorized(*call, bool) *rendered {
	return newRendered(http.StatusUnauthorized, ctJSON, []byte(`{"message":"401 Unauthorized"}`))
}

// exhausted is Rack::Attack's throttled response: plain "Retry later" with
// the reset as Unix time, HTTP date and Retry-After.
func (gitlabDialect) exhausted(c *call, st bucketState) *rendered {
	return glRetryLater(c, c.a.exhaustedStatus, st.reset)
}

func (gitlabDialect) secondaryRefusal(c *call, status int) *rendered {
	return newRendered(status, ctText, []byte("Retry later\n"))
}

func glRetryLater(c *call, status int, reset int64) *rendered {
	return newRendered(status, ctTextPlain, []byte("Retry later\n")).
		with("Ratelimit-Resettime", time.Unix(reset, 0).UTC().Format(http.TimeFormat)).
		with("Retry-After", itoa(secondsUntil(c.now, reset)))
}

// endpointRefused is the API's answer when an application rate limit
// (GitLab::ApplicationRateLimiter) refuses: a JSON error.
func (gitlabDialect) endpointRefused(*call) *rendered {
	return newRendered(http.StatusTooManyRequests, ctJSON, []byte(`{"message":{"error":"This endpoint has been requested too many times. Try again later."}}`))
}

// throttleHeaders are Rack::Attack's throttled_response_headers for the
// named throttle: the limit scaled to a minute, the count of the period,
// Remaining 0, and its end as a Unix time and an HTTP date.
func (gitlabDialect) throttleHeaders(_ *call, h http.Header, st bucketState, name string) {
	h["Ratelimit-Name"] = []string{name}
	h["Ratelimit-Limit"] = []string{itoa((st.limit*60 + st.window - 1) / st.window)}
	h["Ratelimit-Observed"] = []string{itoa(st.used)}
	h["Ratelimit-Remaining"] = []string{itoa(st.remaining)}
	h["Ratelimit-Reset"] = []string{itoa(st.reset)}
	h["Ratelimit-Resettime"] = []string{time.Unix(st.reset, 0).UTC().Format(http.TimeFormat)}
}

func glNotFound(*call) *rendered {
	return newRendered(http.StatusNotFound, ctJSON, []byte(`{"error":"404 Not Found"}`))
}

func (gitlabDialect) route(c *call) endpoint {
	s, m := c.segs, c.r.Method
	get := m == http.MethodGet || m == http.MethodHead
	notFound := endpoint{static: glNotFound, write: !get}
	if len(s) < 3 || s[0] != "api" || s[1] != "v4" || !get {
		return notFound
	}
	s = s[2:]
	switch {
	case len(s) == 1 && s[0] == "user":
		return endpoint{needsAuth: true, ownerDependent: true, static: glUser}
	case len(s) == 2 && s[0] == "users":
		return endpoint{static: glUserByID}
	case len(s) == 3 && s[0] == "users" && glUserLists[s[2]]:
		return endpoint{static: glUserPart, variant: s[2]}
	case len(s) == 2 && s[0] == "projects":
		return endpoint{static: glProject}
	case len(s) == 3 && s[0] == "projects" && s[2] == "merge_requests":
		return endpoint{static: glMergeRequests}
	case len(s) == 5 && s[0] == "projects" && s[2] == "repository" && s[3] == "files":
		return endpoint{static: glFile}
	case len(s) == 6 && s[0] == "projects" && s[2] == "repository" && s[3] == "files" && s[5] == "raw":
		return endpoint{static: glFile, variant: "raw"}
	}
	return notFound
}

// glProjectRef resolves a project ID or full path to both.
func glProjectRef(ref string) (id int64, path string) {
	if n, err := strconv.ParseInt(ref, 10, 64); err == nil && n > 0 {
		return n, fmt.Sprintf("group-%d/project-%d", n%1000, n)
	}
	return derivedID("project:" + ref), ref
}

func glUserJSON(login string, id int64) map[string]any {
	return map[string]any{
		"id": id, "username": login, "name": capitalize(login), "state": "active", "locked": false,
		"avatar_url": "https://secure.gravatar.com/avatar/" + hexID(uint64(id), 32) + "?s=80&d=identicon",
		"web_url":    "https://gitlab.com/" + login,
	}
}

func glUser(c *call) *rendered {
	u := glUserJSON(c.own.name, c.own.id)
	u["created_at"] = isoTime(stamp(seedOf("user", c.own.name)))
	u["bio"], u["public_email"], u["bot"] = "", nil, false
	return jsonBody(http.StatusOK, u)
}

// glUserLists are the parts of a user GET /users/:id/<part> answers.
var glUserLists = map[string]bool{"followers": true, "following": true, "status": true, "keys": true, "gpg_keys": true}

// glUserRef resolves a user ID or username to both.
func glUserRef(c *call, ref string) (id int64, login string) {
	if n, err := strconv.ParseInt(ref, 10, 64); err == nil && n > 0 {
		return n, "user" + ref
	}
	return c.a.ownerID(ref), ref
}

// glUserByID is GET /users/:id, the public profile.
func glUserByID(c *call) *rendered {
	id, login := glUserRef(c, c.segs[3])
	u := glUserJSON(login, id)
	h := seedOf("user", login)
	u["created_at"] = isoTime(stamp(h))
	u["bio"], u["location"], u["public_email"], u["bot"] = capitalize(phrase(h, 6)), "", nil, false
	u["followers"], u["following"] = int(h%40), int((h>>8)%40)
	return jsonBody(http.StatusOK, u)
}

// glUserPart is GET /users/:id/followers, /following, /status, /keys and
// /gpg_keys.
func glUserPart(c *call) *rendered {
	id, login := glUserRef(c, c.segs[3])
	h := seedOf("user", login)
	switch c.ep.variant {
	case "status":
		return jsonBody(http.StatusOK, map[string]any{"emoji": "speech_balloon", "availability": "not_set",
			"message": capitalize(phrase(h, 3)), "message_html": capitalize(phrase(h, 3)), "clear_status_at": nil})
	case "keys", "gpg_keys":
		return jsonBody(http.StatusOK, []any{})
	}
	n := int(h % 40)
	if c.ep.variant == "following" {
		n = int((h >> 8) % 40)
	}
	users := make([]map[string]any, 0, min(n, 20))
	for i := range min(n, 20) {
		other := "user" + strconv.FormatInt((id+int64(i)*7919)%1_000_000, 10)
		users = append(users, glUserJSON(other, c.a.ownerID(other)))
	}
	return jsonBody(http.StatusOK, users)
}

func glProject(c *call) *rendered {
	id, path := glProjectRef(c.segs[3])
	ns, name, _ := strings.Cut(path, "/")
	if name == "" {
		name = ns
	}
	h := seedOf("project", path)
	created := stamp(h)
	self := c.base() + "/api/v4/projects/" + strconv.FormatInt(id, 10)
	return jsonBody(http.StatusOK, map[string]any{
		"id": id, "description": capitalize(phrase(h, 5)), "name": name, "path": name,
		"name_with_namespace": ns + " / " + name, "path_with_namespace": path,
		"created_at": isoTime(created), "last_activity_at": isoTime(created.Add(time.Duration(h%5000+c.version()) * time.Hour)),
		"default_branch": "main", "visibility": "public",
		"web_url":    "https://gitlab.com/" + path,
		"readme_url": "https://gitlab.com/" + path + "/-/blob/main/README.md",
		"star_count": h % 5000, "forks_count": (h >> 16) % 500,
		"namespace": map[string]any{"id": derivedID("ns:" + ns), "name": ns, "path": ns, "kind": "group", "full_path": ns},
		"_links":    map[string]string{"self": self, "merge_requests": self + "/merge_requests", "repo_branches": self + "/repository/branches"},
	})
}

func glFile(c *call) *rendered {
	_, path := glProjectRef(c.segs[3])
	file := c.segs[6] // the whole file path: clients escape its slashes
	ref := c.r.URL.Query().Get("ref")
	owner, name, _ := strings.Cut(path, "/")
	text := []byte(fileText(owner, name, file, c.version()))
	if c.ep.variant == "raw" {
		return newRendered(http.StatusOK, ctText, text)
	}
	if ref == "" {
		return newRendered(http.StatusBadRequest, ctJSON, []byte(`{"error":"ref is missing, ref is empty"}`))
	}
	sha := hexID(seedOf("blob", path, file, itoa(int64(c.version()))), 40)
	return jsonBody(http.StatusOK, map[string]any{
		"file_name": file[strings.LastIndexByte(file, '/')+1:], "file_path": file, "size": len(text),
		"encoding": "base64", "content": b64(text), "content_sha256": sha256Hex(text),
		"ref": ref, "blob_id": sha, "commit_id": hexID(seedOf("commit", path, itoa(int64(c.version()))), 40),
		"last_commit_id": hexID(seedOf("commit", path, itoa(int64(c.version()))), 40),
	})
}

func glMergeRequests(c *call) *rendered {
	id, path := glProjectRef(c.segs[3])
	q := c.r.URL.Query()
	total := int(3+seedOf("mrs", path)%80) + int(c.version())
	p := paginate(q, "page", "per_page", 20, 100, total)
	items := make([]map[string]any, 0, max(p.last-p.first+1, 0))
	for i := p.first; i <= p.last; i++ {
		iid := total - i + 1
		h := seedOf("mr", path, strconv.Itoa(iid))
		author := "user" + strconv.Itoa(int(h%50)+1)
		created := stamp(seedOf("project", path)).Add(time.Duration(iid) * 5 * time.Hour)
		state := "opened"
		if h%3 == 0 {
			state = "merged"
		}
		items = append(items, map[string]any{
			"id": int64(h % 400_000_000), "iid": iid, "project_id": id,
			"title": capitalize(phrase(h, 5)), "description": phrase(h>>9, 10) + ".", "state": state,
			"created_at": isoTime(created), "updated_at": isoTime(created.Add(time.Duration(h%48) * time.Hour)),
			"author":        glUserJSON(author, c.a.ownerID(author)),
			"source_branch": "feature-" + strconv.Itoa(iid), "target_branch": "main",
			"sha":     hexID(h, 40),
			"web_url": "https://gitlab.com/" + path + "/-/merge_requests/" + strconv.Itoa(iid),
		})
	}
	rd := jsonBody(http.StatusOK, items)
	rd.with("X-Page", strconv.Itoa(p.number)).with("X-Per-Page", strconv.Itoa(p.perPage)).
		with("X-Total", strconv.Itoa(p.total)).with("X-Total-Pages", strconv.Itoa(p.pages))
	next, prev := "", ""
	if p.number < p.pages {
		next = strconv.Itoa(p.number + 1)
	}
	if p.number > 1 {
		prev = strconv.Itoa(min(p.number-1, p.pages))
	}
	rd.with("X-Next-Page", next).with("X-Prev-Page", prev)
	var links []string
	if prev != "" {
		links = append(links, fmt.Sprintf(`<%s>; rel="prev"`, pageURL(c.base(), c.rel, q, "page", "per_page", p.perPage, p.number-1)))
	}
	if next != "" {
		links = append(links, fmt.Sprintf(`<%s>; rel="next"`, pageURL(c.base(), c.rel, q, "page", "per_page", p.perPage, p.number+1)))
	}
	links = append(links,
		fmt.Sprintf(`<%s>; rel="first"`, pageURL(c.base(), c.rel, q, "page", "per_page", p.perPage, 1)),
		fmt.Sprintf(`<%s>; rel="last"`, pageURL(c.base(), c.rel, q, "page", "per_page", p.perPage, p.pages)))
	return rd.with("Link", strings.Join(links, ", "))
}

// fileText is the content of any file of a repository: its README for
// README files, a small stable text otherwise.
func fileText(owner, repo, file string, version uint64) string {
	base := file[strings.LastIndexByte(file, '/')+1:]
	if strings.EqualFold(strings.TrimSuffix(base, ".md"), "readme") {
		return readme(owner, repo, version)
	}
	h := seedOf("file", owner, repo, file)
	text := fmt.Sprintf("%s\n%s.\n", file, capitalize(phrase(h, 8)))
	if version > 0 {
		text += fmt.Sprintf("revision %d\n", version)
	}
	return text
}
