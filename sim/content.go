package sim

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"hash/maphash"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// bodyCache keeps rendered answers so the hot path serves precomputed bytes.
// It is sharded to keep concurrent readers off one lock, and a shard that
// fills up is simply emptied: every entry can be rendered again.
type bodyCache struct {
	shards [16]cacheShard
}

type cacheShard struct {
	mu sync.RWMutex
	m  map[string]*rendered
}

const cacheShardEntries = 2048

var cacheSeed = maphash.MakeSeed()

func (bc *bodyCache) shard(key string) *cacheShard {
	return &bc.shards[maphash.String(cacheSeed, key)%uint64(len(bc.shards))]
}

func (bc *bodyCache) get(key string) *rendered {
	s := bc.shard(key)
	s.mu.RLock()
	rd := s.m[key]
	s.mu.RUnlock()
	return rd
}

func (bc *bodyCache) put(key string, rd *rendered) {
	s := bc.shard(key)
	s.mu.Lock()
	if s.m == nil || len(s.m) >= cacheShardEntries {
		s.m = make(map[string]*rendered)
	}
	s.m[key] = rd
	s.mu.Unlock()
}

func (bc *bodyCache) clear() {
	for i := range bc.shards {
		s := &bc.shards[i]
		s.mu.Lock()
		s.m = nil
		s.mu.Unlock()
	}
}

// Faults.

type fault int

const (
	faultNone fault = iota
	faultError
	faultUnavailable
	faultDrop
	faultSlow
	faultBareRefusal
	faultOverload
)

// drawFault decides the fault of the API's next request: the n-th request
// always gets the same draw for a given seed.
func (a *api) drawFault() (fault, uint64) {
	n := a.faultSeq.Add(1)
	x := splitmix64(a.seed + n*0x9e3779b97f4a7c15)
	u := float64(x>>11) / (1 << 53)
	f := a.faults
	switch {
	case f.BareRefusalAt > 0 && n == uint64(f.BareRefusalAt):
		return faultBareRefusal, x
	case u < f.ErrorRate:
		return faultError, x
	case u < f.ErrorRate+f.UnavailableRate:
		return faultUnavailable, x
	case u < f.ErrorRate+f.UnavailableRate+f.DropRate:
		return faultDrop, x
	case u < f.ErrorRate+f.UnavailableRate+f.DropRate+f.SlowRate:
		return faultSlow, x
	case u < f.ErrorRate+f.UnavailableRate+f.DropRate+f.SlowRate+f.OverloadRate:
		return faultOverload, x
	}
	return faultNone, x
}

// serverError is a 500, 502 or 504 picked by the low bits of the draw.
func serverError(pick uint64) *rendered {
	switch pick % 3 {
	case 0:
		return newRendered(http.StatusInternalServerError, ctJSON, []byte(`{"message":"Server Error"}`+"\n"))
	case 1:
		return newRendered(http.StatusBadGateway, "text/html", []byte("<html><body><h1>502 Bad Gateway</h1></body></html>\n"))
	default:
		return newRendered(http.StatusGatewayTimeout, ctJSON, []byte(`{"message":"We couldn't respond to your request in time. Sorry about that. Please try resubmitting your request and contact us if the problem persists."}`+"\n"))
	}
}

// drop closes the connection without an answer.
func drop(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			_ = conn.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}

func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// Synthetic content: every name gets stable, plausible data derived from a
// hash of the name, so any owner, repository or model "exists".

// seedOf hashes names into a stable number.
func seedOf(parts ...string) uint64 {
	h := fnv.New64a()
	for _, p := range parts {
		_, _ = h.Write([]byte(p))
		_, _ = h.Write([]byte{0})
	}
	return splitmix64(h.Sum64())
}

var epoch2015 = time.Date(2015, 1, 1, 0, 0, 0, 0, time.UTC)

// stamp is a stable instant between 2015 and 2025 for seed h.
func stamp(h uint64) time.Time {
	return epoch2015.Add(time.Duration(h%(10*365*24*3600)) * time.Second)
}

func isoTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05Z") }

var words = []string{
	"fast", "tiny", "durable", "reactive", "pragmatic", "minimal", "typed", "portable",
	"parser", "scheduler", "cache", "client", "toolkit", "engine", "bridge", "index",
	"for", "with", "and", "the", "a", "of", "in", "over",
	"streams", "graphs", "queues", "tokens", "images", "models", "logs", "events",
}

// phrase is n stable words for seed h.
func phrase(h uint64, n int) string {
	parts := make([]string, n)
	for i := range parts {
		h = splitmix64(h)
		parts[i] = words[h%uint64(len(words))]
	}
	return strings.Join(parts, " ")
}

var languages = []string{"Go", "Python", "Rust", "TypeScript", "C", "Java", "Ruby", "Shell"}

// readme is a repository's (or model's) README text, changing with version.
func readme(owner, name string, version uint64) string {
	h := seedOf(owner, name, "readme")
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\n", name)
	fmt.Fprintf(&b, "%s by %s: a %s.\n\n", capitalize(name), owner, phrase(h, 6))
	b.WriteString("## Usage\n\n")
	fmt.Fprintf(&b, "Install it, then run `%s --help`.\n\n", name)
	b.WriteString("## Notes\n\n")
	for i := range 3 {
		fmt.Fprintf(&b, "- %s.\n", phrase(h+uint64(i)+1, 5))
	}
	if version > 0 {
		fmt.Fprintf(&b, "\nRevision %d.\n", version)
	}
	return b.String()
}

// base64Lines encodes b the way GitHub's contents API does: base64 wrapped
// at 60 characters with a newline after each line.
func base64Lines(b []byte) string {
	enc := base64.StdEncoding.EncodeToString(b)
	var sb strings.Builder
	for len(enc) > 60 {
		sb.WriteString(enc[:60])
		sb.WriteByte('\n')
		enc = enc[60:]
	}
	sb.WriteString(enc)
	sb.WriteByte('\n')
	return sb.String()
}

// hexID is a stable hex string of n digits for seed h (commit SHAs, ids).
func hexID(h uint64, n int) string {
	var sb strings.Builder
	for sb.Len() < n {
		h = splitmix64(h)
		sb.WriteString(strconv.FormatUint(h|1<<63, 16))
	}
	return sb.String()[:n]
}

// jsonBody marshals v; the content is always marshalable.
func jsonBody(status int, v any) *rendered {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("sim: marshal %T: %v", v, err))
	}
	return newRendered(status, ctJSON, b)
}

// page is one page of a listing of total items.
type page struct {
	number, perPage, total int
	first, last            int // 1-based item range [first, last], empty when first > last
	pages                  int
}

// paginate reads page and per-page query parameters (names differ by
// dialect) with the dialect's default and maximum page size.
func paginate(q url.Values, pageKey, perPageKey string, def, maxPer, total int) page {
	p := page{number: 1, perPage: def, total: total}
	if n, err := strconv.Atoi(q.Get(pageKey)); err == nil && n > 0 {
		p.number = n
	}
	if n, err := strconv.Atoi(q.Get(perPageKey)); err == nil && n > 0 {
		p.perPage = min(n, maxPer)
	}
	p.pages = max((total+p.perPage-1)/p.perPage, 1)
	p.first = (p.number-1)*p.perPage + 1
	p.last = min(p.number*p.perPage, total)
	return p
}

// newestFirst answers one page of a listing of total items numbered total
// (the newest, listed first) down to 1, with the Link header of the pages
// around it; the page size is perPageKey's, 30 by default.
func newestFirst(c *call, perPageKey string, maxPer, total int, item func(number int) map[string]any) *rendered {
	q := c.r.URL.Query()
	p := paginate(q, "page", perPageKey, 30, maxPer, total)
	items := make([]map[string]any, 0, max(p.last-p.first+1, 0))
	for i := p.first; i <= p.last; i++ {
		items = append(items, item(total-i+1))
	}
	rd := jsonBody(http.StatusOK, items)
	if link := linkHeader(c.base(), c.rel, q, "page", perPageKey, p); link != "" {
		rd.with("Link", link)
	}
	return rd
}

// issueInput reads a request to create an issue: its title and body, and
// whether the request was JSON at all.
func issueInput(c *call) (title, body string, ok bool) {
	var in struct {
		Title string `json:"title"`
		Body  string `json:"body"`
	}
	b, _ := io.ReadAll(io.LimitReader(c.r.Body, 1<<20))
	if err := json.Unmarshal(b, &in); err != nil {
		return "", "", false
	}
	return in.Title, in.Body, true
}

// created makes issue (numbered after the repository's last) the one the
// caller just created with title and body; user is the caller as the
// dialect renders a user.
func created(c *call, issue, user map[string]any, title, body string) map[string]any {
	issue["title"], issue["body"], issue["comments"] = title, body, 0
	issue["user"] = user
	issue["created_at"], issue["updated_at"] = isoTime(c.now), isoTime(c.now)
	return issue
}

// pageURL is the URL of page n of the listing at base+rel, keeping the other
// query parameters (sorted, so the link is stable).
func pageURL(base, rel string, q url.Values, pageKey, perPageKey string, perPage, n int) string {
	v := url.Values{}
	for k, vs := range q {
		if k != pageKey && k != perPageKey {
			v[k] = vs
		}
	}
	v.Set(perPageKey, strconv.Itoa(perPage))
	v.Set(pageKey, strconv.Itoa(n))
	return base + rel + "?" + v.Encode()
}

// linkHeader is an RFC 8288 Link header with the given relations, in the
// order GitHub writes them (prev, next, last, first).
func linkHeader(base, rel string, q url.Values, pageKey, perPageKey string, p page) string {
	type link struct {
		rel string
		n   int
	}
	var links []link
	if p.number > 1 {
		links = append(links, link{"prev", min(p.number-1, p.pages)})
	}
	if p.number < p.pages {
		links = append(links, link{"next", p.number + 1}, link{"last", p.pages})
	}
	if p.number > 1 {
		links = append(links, link{"first", 1})
	}
	parts := make([]string, len(links))
	for i, l := range links {
		parts[i] = fmt.Sprintf("<%s>; rel=%q", pageURL(base, rel, q, pageKey, perPageKey, p.perPage, l.n), l.rel)
	}
	return strings.Join(parts, ", ")
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// capitalize upper-cases the first letter of s.
func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
