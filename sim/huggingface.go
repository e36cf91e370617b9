package sim

import (
	"crypto/sha1"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// huggingfaceDialect speaks the Hugging Face Hub API and file resolvers,
// with the IETF-draft structured headers the Hub documents ("Hub Rate
// limits"): RateLimit: "api";r=<remaining>;t=<seconds to reset> and
// RateLimit-Policy: "fixed window";"api";q=<quota>;w=<window seconds>.
type huggingfaceDialect struct{}

var (
	hfVary          = []string{"Origin"}
	hfResourceNames = []string{`"api"`, `"resolvers"`, `"pages"`}
)

func (huggingfaceDialect) credential(r *http.Request) (string, bool) {
	return bearer(r, "Bearer")
}

func (huggingfaceDialect) headers(c *call, h http.Header) {
	h["Vary"] = hfVary
	x := splitmix64(c.a.seed ^ c.requestID())
	h["X-Request-Id"] = []string{fmt.Sprintf("Root=1-%08x-%s", uint32(c.now.Unix()), hexID(x, 24))}
}

func (huggingfaceDialect) rateHeaders(c *call, h http.Header, st bucketState) {
	name := hfResourceNames[c.ep.res]
	h["Ratelimit"] = []string{name + ";r=" + itoa(st.remaining) + ";t=" + itoa(secondsUntil(c.now, st.reset))}
	mode := `"fixed window"`
	if !st.fixed {
		mode = `"rolling window"` // not something the Hub sends: it only has fixed windows
	}
	h["Ratelimit-Policy"] = []string{mode + ";" + name + ";q=" + itoa(st.limit) + ";w=" + itoa(st.window)}
}

// etag is what the Hub's API (an Express app) sends, from the etag
// package Express uses: a weak tag of the length in hex and the first 27
// characters of the body's base64 SHA-1, the body alone.
func (huggingfaceDialect) etag(body []byte) string {
	sum := sha1.Sum(body)
	return `W/"` + strconv.FormatInt(int64(len(body)), 16) + "-" + base64.StdEncoding.EncodeToString(sum[:])[:27] + `"`
}

func (huggingfaceDialect) tagFor(_ *http.Request, rd *rendered) string { return rd.etag }

func hfError(status int, msg string) *rendered {
	return jsonBody(status, map[string]string{"error": msg})
}

func (huggingfaceDialect) unauthorized(*call, bool) *rendered {
	return hfError(http.StatusUnauthorized, "Invalid credentials in Authorization header")
}

func (huggingfaceDialect) exhausted(c *call, st bucketState) *rendered {
	if c.own.anonymous {
		return hfError(c.a.exhaustedStatus, fmt.Sprintf("We had to rate limit your IP (%s). To continue using our service, create a HF account or login to your existing account, and make sure you pass a HF_TOKEN if you're using the API.", c.own.name))
	}
	return hfError(c.a.exhaustedStatus, fmt.Sprintf("We had to rate limit you, you hit the quota of %d %s requests per %s period. Upgrade to a PRO account for more quota.",
		st.limit, strings.Trim(hfResourceNames[c.ep.res], `"`), humanWindow(st.window)))
}

func (huggingfaceDialect) secondaryRefusal(c *call, status int) *rendered {
	return hfError(status, "Too many concurrent requests, please slow down.")
}

func (d huggingfaceDialect) endpointRefused(c *call) *rendered {
	return d.secondaryRefusal(c, http.StatusTooManyRequests)
}

func (d huggingfaceDialect) throttleHeaders(c *call, h http.Header, st bucketState, _ string) {
	d.rateHeaders(c, h, st)
}

// humanWindow writes a window like the Hub's messages do ("5 minutes").
func humanWindow(sec int64) string {
	switch {
	case sec%3600 == 0:
		return plural(sec/3600, "hour")
	case sec%60 == 0:
		return plural(sec/60, "minute")
	}
	return plural(sec, "second")
}

func plural(n int64, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return itoa(n) + " " + unit + "s"
}

func hfNotFound(*call) *rendered {
	return hfError(http.StatusNotFound, "Sorry, we can't find the page you are looking for.")
}

func (huggingfaceDialect) route(c *call) endpoint {
	s, m := c.segs, c.r.Method
	get := m == http.MethodGet || m == http.MethodHead
	if len(s) > 0 && s[0] == "api" {
		switch {
		case !get:
		case len(s) == 2 && s[1] == "whoami-v2":
			return endpoint{needsAuth: true, ownerDependent: true, static: hfWhoami}
		case len(s) == 4 && (s[1] == "models" || s[1] == "datasets"):
			return endpoint{static: hfRepoInfo}
		}
		return endpoint{static: hfNotFound, write: !get}
	}
	// Resolvers: /{o}/{m}/resolve/{rev}/{path} and the datasets/ form.
	r := s
	if len(r) > 0 && r[0] == "datasets" {
		r = r[1:]
	}
	if len(r) >= 5 && r[2] == "resolve" && get {
		return endpoint{res: 1, static: hfResolve}
	}
	if len(r) >= 3 && r[2] == "resolve" {
		return endpoint{res: 1, static: hfNotFound, write: !get}
	}
	return endpoint{res: 2, static: hfNotFound, write: !get}
}

func hfObjectID(h uint64) string { return hexID(h, 24) }

func hfWhoami(c *call) *rendered {
	h := seedOf("hfuser", c.own.name)
	return jsonBody(http.StatusOK, map[string]any{
		"type": "user", "id": hfObjectID(h), "name": c.own.name, "fullname": capitalize(c.own.name),
		"isPro": false, "canPay": false, "emailVerified": true, "orgs": []any{},
		"avatarUrl": "/avatars/" + hexID(h>>3, 32) + ".svg",
		"auth": map[string]any{"type": "access_token", "accessToken": map[string]any{
			"displayName": "sim", "role": "read", "createdAt": isoMillis(stamp(h)),
		}},
	})
}

func isoMillis(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

var hfPipelines = []string{"text-generation", "text-classification", "image-classification", "automatic-speech-recognition", "feature-extraction"}

func hfRepoInfo(c *call) *rendered {
	kind, o, name := c.segs[1], c.segs[2], c.segs[3]
	id := o + "/" + name
	h := seedOf("hfrepo", kind, id)
	v := c.version()
	info := map[string]any{
		"_id": hfObjectID(h), "id": id, "author": o,
		"sha":          hfCommit(kind, id, v),
		"lastModified": isoMillis(stamp(h).Add(time.Duration(h%5000+v) * time.Hour)),
		"createdAt":    isoMillis(stamp(h)),
		"private":      false, "disabled": false, "gated": false,
		"downloads": h % 1_000_000, "likes": (h >> 20) % 5000,
		"siblings": []map[string]string{{"rfilename": ".gitattributes"}, {"rfilename": "README.md"}, {"rfilename": "config.json"}},
	}
	if kind == "models" {
		pipeline := hfPipelines[(h>>7)%uint64(len(hfPipelines))]
		info["modelId"] = id
		info["pipeline_tag"] = pipeline
		info["library_name"] = "transformers"
		info["tags"] = []string{"transformers", "safetensors", pipeline}
	} else {
		info["tags"] = []string{"size_categories:1K<n<10K"}
	}
	return jsonBody(http.StatusOK, info)
}

func hfCommit(kind, id string, version uint64) string {
	return hexID(seedOf("hfcommit", kind, id, itoa(int64(version))), 40)
}

// hfResolve serves a file of a repository, as the resolver does for files
// kept in git (small files; LFS files would redirect to a CDN).
func hfResolve(c *call) *rendered {
	s, kind := c.segs, "models"
	if s[0] == "datasets" {
		s, kind = s[1:], "datasets"
	}
	o, name, file := s[0], s[1], strings.Join(s[4:], "/")
	v := c.version()
	var rd *rendered
	switch file {
	case "config.json":
		h := seedOf("config", o, name)
		rd = jsonBody(http.StatusOK, map[string]any{"architectures": []string{"SimForCausalLM"}, "model_type": "sim", "hidden_size": 256 << (h % 4), "num_hidden_layers": 2 + h%30, "sim_revision": v})
	default:
		rd = newRendered(http.StatusOK, ctText, []byte(fileText(o, name, file, v)))
	}
	rd.etag = `"` + sha256Hex(rd.body)[:40] + `"`
	base := file[strings.LastIndexByte(file, '/')+1:]
	return rd.with("X-Repo-Commit", hfCommit(kind, o+"/"+name, v)).
		with("Accept-Ranges", "bytes").
		with("Content-Disposition", fmt.Sprintf(`inline; filename*=UTF-8''%s; filename="%s";`, base, base))
}
