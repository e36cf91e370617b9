package sim

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// giteaDialect speaks the Gitea (and Forgejo, Codeberg) API v1.
//
// Gitea and Forgejo have no API rate limiting of their own and send no
// rate-limit headers. Public instances limit traffic in a reverse proxy
// instead (Codeberg uses Caddy's rate_limit), which answers 429 with
// Retry-After and an empty body. So by default this dialect enforces nothing
// and sends nothing; with a Limit it refuses like such a proxy, and only when
// RateLimitHeaders is set does it add the conservative, widely understood
// X-RateLimit-Limit, X-RateLimit-Remaining and X-RateLimit-Reset (Unix
// seconds). A client must therefore cope with a Gitea that says nothing.
type giteaDialect struct{}

var (
	gtCache   = []string{"max-age=0, private, must-revalidate, no-transform"}
	gtNosniff = []string{"nosniff"}
)

func (giteaDialect) credential(r *http.Request) (string, bool) {
	if t, ok := bearer(r, "token", "Bearer"); ok {
		return t, true
	}
	return queryToken(r, "access_token", "token")
}

func (giteaDialect) headers(_ *call, h http.Header) {
	h["Cache-Control"] = gtCache
	h["X-Content-Type-Options"] = gtNosniff
}

func (giteaDialect) rateHeaders(_ *call, h http.Header, st bucketState) {
	h["X-Ratelimit-Limit"] = []string{itoa(st.limit)}
	h["X-Ratelimit-Remaining"] = []string{itoa(st.remaining)}
	h["X-Ratelimit-Reset"] = []string{itoa(st.reset)}
}

func (giteaDialect) etag(body []byte) string { return `"` + sha256Hex(body)[:40] + `"` }

func (giteaDialect) tagFor(_ *http.Request, rd *rendered) string { return rd.etag }

func gtError(c *call, status int, msg string) *rendered {
	return jsonBody(status, map[string]any{"message": msg, "url": c.base() + "/api/swagger"})
}

func (giteaDialect) unauthorized(c *call, missing bool) *rendered {
	if missing {
		return gtError(c, http.StatusUnauthorized, "token is required")
	}
	return gtError(c, http.StatusUnauthorized, "invalid username, password or token")
}

// exhausted is the reverse proxy's refusal: no body, Retry-After.
func (giteaDialect) exhausted(c *call, st bucketState) *rendered {
	return newRendered(c.a.exhaustedStatus, "", nil).with("Retry-After", itoa(max(secondsUntil(c.now, st.reset), 1)))
}

func (giteaDialect) secondaryRefusal(_ *call, status int) *rendered {
	return newRendered(status, "", nil)
}

// endpointRefused is the refusal of a proxy limiting some paths: no body.
func (giteaDialect) endpointRefused(*call) *rendered {
	return newRendered(http.StatusTooManyRequests, "", nil)
}

func (d giteaDialect) throttleHeaders(c *call, h http.Header, st bucketState, _ string) {
	d.rateHeaders(c, h, st)
}

func gtNotFound(c *call) *rendered {
	return jsonBody(http.StatusNotFound, map[string]any{"message": "The target couldn't be found.", "url": c.base() + "/api/swagger", "errors": []string{}})
}

func (giteaDialect) route(c *call) endpoint {
	s, m := c.segs, c.r.Method
	get := m == http.MethodGet || m == http.MethodHead
	notFound := endpoint{static: gtNotFound, write: !get}
	if len(s) < 3 || s[0] != "api" || s[1] != "v1" {
		return notFound
	}
	s = s[2:]
	switch {
	case len(s) == 1 && s[0] == "user" && get:
		return endpoint{needsAuth: true, ownerDependent: true, static: gtUser}
	case len(s) == 2 && s[0] == "users" && get:
		return endpoint{static: gtUser}
	case len(s) == 3 && s[0] == "repos" && get:
		return endpoint{static: gtRepo}
	case len(s) >= 5 && s[0] == "repos" && (s[3] == "raw" || s[3] == "contents") && get:
		if s[3] == "raw" {
			return endpoint{static: gtFile, variant: "raw"}
		}
		return endpoint{static: gtFile}
	case len(s) == 4 && s[0] == "repos" && s[3] == "issues" && get:
		return endpoint{static: gtIssues}
	case len(s) == 4 && s[0] == "repos" && s[3] == "issues" && m == http.MethodPost:
		return endpoint{write: true, dynamic: gtCreateIssue, bumps: []string{c.relKey()}}
	}
	return notFound
}

func gtUserJSON(c *call, login string, id int64) map[string]any {
	h := seedOf("user", login)
	return map[string]any{
		"id": id, "login": login, "login_name": "", "full_name": capitalize(login), "email": login + "@noreply.codeberg.org",
		"avatar_url": c.base() + "/avatars/" + hexID(h, 32), "html_url": "https://codeberg.org/" + login,
		"created": isoTime(stamp(h)), "is_admin": false, "restricted": false, "visibility": "public",
	}
}

func gtUser(c *call) *rendered {
	if len(c.segs) == 3 { // /api/v1/user
		return jsonBody(http.StatusOK, gtUserJSON(c, c.own.name, c.own.id))
	}
	login := c.segs[3]
	return jsonBody(http.StatusOK, gtUserJSON(c, login, c.a.ownerID(login)))
}

func gtRepo(c *call) *rendered {
	o, r := c.segs[3], c.segs[4]
	h := seedOf("repo", o, r)
	created := stamp(h)
	return jsonBody(http.StatusOK, map[string]any{
		"id": int64(h % 3_000_000), "owner": gtUserJSON(c, o, c.a.ownerID(o)), "name": r, "full_name": o + "/" + r,
		"description": capitalize(phrase(h, 5)), "private": false, "fork": false, "mirror": false,
		"html_url": "https://codeberg.org/" + o + "/" + r, "clone_url": "https://codeberg.org/" + o + "/" + r + ".git",
		"stars_count": h % 3000, "forks_count": (h >> 12) % 300, "open_issues_count": gtIssueTotal(o, r, 0),
		"default_branch": "main", "created_at": isoTime(created),
		"updated_at": isoTime(created.Add(time.Duration(h%5000+c.version()) * time.Hour)),
		"language":   languages[(h>>30)%uint64(len(languages))],
	})
}

func gtFile(c *call) *rendered {
	o, r := c.segs[3], c.segs[4]
	file := strings.Join(c.segs[5:], "/")
	text := []byte(fileText(o, r, file, c.version()))
	if c.ep.variant == "raw" {
		return newRendered(http.StatusOK, ctText, text)
	}
	self := c.base() + "/api/v1/repos/" + url.PathEscape(o) + "/" + url.PathEscape(r) + "/contents/" + file
	sha := hexID(seedOf("blob", o, r, file, itoa(int64(c.version()))), 40)
	return jsonBody(http.StatusOK, map[string]any{
		"name": file[strings.LastIndexByte(file, '/')+1:], "path": file, "sha": sha, "type": "file", "size": len(text),
		"encoding": "base64", "content": b64(text), "url": self + "?ref=main",
		"html_url":     "https://codeberg.org/" + o + "/" + r + "/src/branch/main/" + file,
		"download_url": "https://codeberg.org/" + o + "/" + r + "/raw/branch/main/" + file,
	})
}

func gtIssueTotal(o, r string, version uint64) int {
	return int(3+seedOf("gtissues", o, r)%60) + int(version)
}

func gtIssueJSON(c *call, o, r string, number int) map[string]any {
	h := seedOf("gtissue", o, r, strconv.Itoa(number))
	author := "user" + strconv.Itoa(int(h%50)+1)
	created := stamp(seedOf("repo", o, r)).Add(time.Duration(number) * 9 * time.Hour)
	return map[string]any{
		"id": int64(h % 2_000_000), "number": number, "title": capitalize(phrase(h, 6)), "body": phrase(h>>5, 10) + ".",
		"user": gtUserJSON(c, author, c.a.ownerID(author)), "state": "open", "comments": h % 20,
		"created_at": isoTime(created), "updated_at": isoTime(created.Add(time.Duration(h%72) * time.Hour)),
		"html_url": "https://codeberg.org/" + o + "/" + r + "/issues/" + strconv.Itoa(number),
	}
}

// gtIssues pages like Gitea: page and limit, X-Total-Count and Link.
func gtIssues(c *call) *rendered {
	o, r := c.segs[3], c.segs[4]
	total := gtIssueTotal(o, r, c.version())
	rd := newestFirst(c, "limit", 50, total, func(n int) map[string]any { return gtIssueJSON(c, o, r, n) })
	return rd.with("X-Total-Count", strconv.Itoa(total))
}

func gtCreateIssue(c *call, _ bucketState) *rendered {
	o, r := c.segs[3], c.segs[4]
	title, body, ok := issueInput(c)
	if !ok || title == "" {
		return jsonBody(http.StatusUnprocessableEntity, map[string]any{"message": "[Title]: Required", "url": c.base() + "/api/swagger"})
	}
	issue := gtIssueJSON(c, o, r, gtIssueTotal(o, r, c.version())+1)
	return jsonBody(http.StatusCreated, created(c, issue, gtUserJSON(c, c.own.name, c.own.id), title, body))
}
