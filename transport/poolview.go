package transport

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/ratekeeper/ratekeeper/creds"
	"github.com/ratekeeper/ratekeeper/headers"
	"github.com/ratekeeper/ratekeeper/quota"
)

// The pool view: the rate-limit fields of an answer the transport delivers
// say what the caller can still do through the transport, not what the one
// token that sent it had left. A client that keeps its own view of the
// limit (go-github refuses to send while the last answer of a category
// said "remaining: 0"; octokit's throttling and PyGithub's retry wait for
// the reset) would otherwise stop while other credentials of the pool
// could serve at once.
//
// The server's own fields stay available, each under its name prefixed
// with HeaderUpstreamPrefix; Options.UpstreamRateLimitHeaders leaves the
// answer's fields as the server sent them.

// HeaderUpstreamPrefix prefixes the server's own rate-limit fields on an
// answer whose fields the transport replaced with the pool's:
// X-Ratekeeper-Upstream-X-Ratelimit-Remaining holds what the server said in
// X-Ratelimit-Remaining.
const HeaderUpstreamPrefix = "X-Ratekeeper-Upstream-"

// poolView follows each bucket as this process's answers describe it: a
// shadow of the quota state, fed the same answers through the same
// quota.Settle, that a delivered answer reads without asking the State (a
// shared database would cost a query per request). The server's counters
// include every process's spending, so the shadow of a bucket is as true
// as its last answer; a bucket no answer of this process described is
// counted as a fresh one (see figuresAt).
type poolView struct {
	mu      sync.Mutex
	buckets map[BucketID]*quota.Bucket
}

// observe applies an answer of slot's bucket to its shadow. A refusal of
// the request's scope (a limit the bucket does not announce, see
// quota.SettleScoped) leaves the shadow as its answers left it, as it
// leaves the bucket.
func (v *poolView) observe(slot Slot, ans *quota.Answer, now time.Time) {
	id := slot.Bucket
	if ans.Reading == nil || id.Owner == "" {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	b := v.buckets[id]
	if b == nil {
		if v.buckets == nil {
			v.buckets = map[BucketID]*quota.Bucket{}
		}
		nb := quota.NewBucket()
		b = &nb
		v.buckets[id] = b
	}
	if slot.Scope != (BucketID{}) && ans.Reading.Limited != headers.NotLimited {
		scratch := quota.NewBucket()
		quota.SettleScoped(nil, b, &scratch, 0, ans, now)
		return
	}
	quota.Settle(nil, b, 0, ans, now)
}

// poolFigures is what a pool's distinct buckets of one resource allow at
// one moment, less the policy's reserve in each.
type poolFigures struct {
	known            bool // some bucket of the pool has stated its counts
	limit, remaining int64
	// reset is the soonest moment a bucket refills; zero when none said.
	reset time.Time
}

// figures is what the pool allows a request of the resource sent at now.
// When nothing is left but a bucket refills within the max wait, a request
// sent now is still served, after a wait in the transport: the figures
// are then those at the end of the max wait, so that a client keeping its
// own view of the limit sends it rather than refusing it itself. Remaining
// is 0 only when no bucket can serve within the max wait, when the request
// would get a *WaitError (the gateway's 429).
func (t *Transport) figures(l *lane, pool *creds.Pool, resource string, now time.Time) poolFigures {
	f := t.figuresAt(l, pool, resource, now)
	if f.known && f.remaining == 0 {
		horizon := l.maxWait
		if w, ok := t.opts.CallerMaxWait[l.p.Name]; ok {
			horizon = w
		}
		if later := t.figuresAt(l, pool, resource, now.Add(horizon)); later.remaining > 0 {
			f.remaining, f.limit = later.remaining, later.limit
		}
	}
	return f
}

// figuresAt sums the resource's buckets at the moment at over the pool's
// usable credentials, each bucket once (credentials of one owner share
// it). A bucket whose window has passed counts as refilled; one no answer
// has described yet (a credential not used so far) counts as a fresh
// bucket of the largest limit the others state, since it can serve as soon
// as it is asked.
func (t *Transport) figuresAt(l *lane, pool *creds.Pool, resource string, now time.Time) poolFigures {
	var ownerBuf [16]string
	owners := pool.AppendBuckets(ownerBuf[:0], now)
	var f poolFigures
	var unknown, largest int64
	t.view.mu.Lock()
	for _, owner := range owners {
		sb := t.view.buckets[BucketID{Provider: l.key, Owner: owner, Resource: resource}]
		if sb == nil {
			unknown++
			continue
		}
		b := sb.At(now)
		if !b.Known() {
			unknown++
			continue
		}
		limit := b.Limit
		if limit == quota.UnknownCount {
			limit = b.Remaining
		}
		res := reserveOf(l.policy, limit)
		f.known = true
		f.remaining += max(b.Remaining-res, 0)
		f.limit += max(limit-res, 0)
		largest = max(largest, limit)
		if !b.Reset.IsZero() && (f.reset.IsZero() || b.Reset.Before(f.reset)) {
			f.reset = b.Reset
		}
	}
	t.view.mu.Unlock()
	if f.known && unknown > 0 {
		fresh := max(largest-reserveOf(l.policy, largest), 0)
		f.remaining += unknown * fresh
		f.limit += unknown * fresh
	}
	return f
}

// reserveOf is what policy p keeps back of a bucket of the given limit,
// as package quota counts it: the count, or the percentage of the limit.
func reserveOf(p quota.Policy, limit int64) int64 {
	if p.ReservePercent > 0 {
		if limit <= 0 {
			return 0
		}
		return int64(float64(limit) * p.ReservePercent / 100)
	}
	return p.Reserve
}

// showPool replaces the rate-limit fields of the answer about to be
// delivered with the pool's figures, in the dialect the server used, and
// gives a refusal a Retry-After: the soonest moment any credential of the
// pool can go. Nothing changes while no bucket of the pool has stated its
// counts, nor with Options.UpstreamRateLimitHeaders.
func (x *exchange) showPool(resp *http.Response) {
	t := x.t
	if t.opts.UpstreamRateLimitHeaders {
		return
	}
	now := t.opts.Now()
	h := resp.Header
	var w fieldWriter
	if x.o.limited {
		// Added where the server sent none (GitHub's primary refusal):
		// the token's reset in the fields below would no longer say it.
		if d, ok := x.poolWait(now); ok {
			w.put(&retryAfter, valueInt, ceilSeconds(d), 0, "")
		}
	}
	if x.class.Meter != "" {
		x.showTokenPool(h, now)
		w.apply(h)
		return
	}
	fields := familyOf(h)
	if fields == nil {
		w.apply(h)
		return
	}
	f := t.figures(x.l, x.pool, x.class.Resource, now)
	if !f.known {
		w.apply(h)
		return
	}
	f.write(&w, h, fields, now)
	w.apply(h)
}

// familyOf returns the family of rate-limit fields h holds, told by one
// field each family always has; nil when h holds none.
func familyOf(h http.Header) []rateLimitField {
	for _, fam := range rateLimitFamilies {
		if h[fam[1].name] != nil {
			return fam
		}
	}
	return nil
}

// fieldKind is what a rate-limit field states.
type fieldKind uint8

const (
	kindLimit fieldKind = iota
	kindRemaining
	kindUsed
	kindReset     // Unix seconds, or delta seconds when the server sent a small number
	kindResetTime // an HTTP date (GitLab's RateLimit-ResetTime)
	kindStructured
	kindPolicy
)

// rateLimitFamilies are the fields the pool's figures replace, by their
// canonical names, in families whose second field (Remaining, or the
// structured RateLimit) tells that an answer speaks it: GitHub's and
// Gitea's x-ratelimit-*, GitLab's and the earlier IETF drafts'
// RateLimit-*, the IETF draft's structured RateLimit and RateLimit-Policy
// (Hugging Face), and x-rate-limit-*. Other dialects (Discord's buckets,
// OpenAI's per-kind fields) pass unchanged.
var rateLimitFamilies = [...][]rateLimitField{
	{
		{"X-Ratelimit-Limit", HeaderUpstreamPrefix + "X-Ratelimit-Limit", kindLimit},
		{"X-Ratelimit-Remaining", HeaderUpstreamPrefix + "X-Ratelimit-Remaining", kindRemaining},
		{"X-Ratelimit-Used", HeaderUpstreamPrefix + "X-Ratelimit-Used", kindUsed},
		{"X-Ratelimit-Reset", HeaderUpstreamPrefix + "X-Ratelimit-Reset", kindReset},
	},
	{
		{"Ratelimit-Limit", HeaderUpstreamPrefix + "Ratelimit-Limit", kindLimit},
		{"Ratelimit-Remaining", HeaderUpstreamPrefix + "Ratelimit-Remaining", kindRemaining},
		{"Ratelimit-Observed", HeaderUpstreamPrefix + "Ratelimit-Observed", kindUsed},
		{"Ratelimit-Reset", HeaderUpstreamPrefix + "Ratelimit-Reset", kindReset},
		{"Ratelimit-Resettime", HeaderUpstreamPrefix + "Ratelimit-Resettime", kindResetTime},
	},
	{
		{"Ratelimit-Policy", HeaderUpstreamPrefix + "Ratelimit-Policy", kindPolicy},
		{"Ratelimit", HeaderUpstreamPrefix + "Ratelimit", kindStructured},
	},
	{
		{"X-Rate-Limit-Limit", HeaderUpstreamPrefix + "X-Rate-Limit-Limit", kindLimit},
		{"X-Rate-Limit-Remaining", HeaderUpstreamPrefix + "X-Rate-Limit-Remaining", kindRemaining},
		{"X-Rate-Limit-Reset", HeaderUpstreamPrefix + "X-Rate-Limit-Reset", kindReset},
	},
}

type rateLimitField struct {
	name, upstream string
	kind           fieldKind
}

// write puts f's figures in w for every field of the family that h holds.
func (f *poolFigures) write(w *fieldWriter, h http.Header, fields []rateLimitField, now time.Time) {
	used := max(f.limit-f.remaining, 0)
	var resetIn int64
	if !f.reset.IsZero() {
		resetIn = ceilSeconds(f.reset.Sub(now))
	}
	for i := range fields {
		rf := &fields[i]
		old := h[rf.name]
		if old == nil {
			continue
		}
		switch rf.kind {
		case kindLimit:
			w.put(rf, valueInt, f.limit, 0, "")
		case kindRemaining:
			w.put(rf, valueInt, f.remaining, 0, "")
		case kindUsed:
			w.put(rf, valueInt, used, 0, "")
		case kindReset:
			if f.reset.IsZero() {
				continue
			}
			// The bare-number rule of package headers: a value nearer
			// to now's Unix time than to zero is a Unix time, else delta
			// seconds; the pool's reset is written the way the server
			// wrote its own.
			if v, err := strconv.ParseInt(firstValue(old), 10, 64); err == nil && v < now.Unix()/2 {
				w.put(rf, valueInt, resetIn, 0, "")
			} else {
				w.put(rf, valueInt, now.Unix()+resetIn, 0, "")
			}
		case kindResetTime:
			if !f.reset.IsZero() {
				w.put(rf, valueDate, now.Unix()+resetIn, 0, "")
			}
		case kindStructured:
			if f.reset.IsZero() {
				w.put(rf, valueParamR, f.remaining, 0, firstValue(old))
			} else {
				w.put(rf, valueParamRT, f.remaining, resetIn, firstValue(old))
			}
		case kindPolicy:
			w.put(rf, valueParamQ, f.limit, 0, firstValue(old))
		}
	}
}

func firstValue(vs []string) string {
	if len(vs) == 0 {
		return ""
	}
	return vs[0]
}

// ceilSeconds is d in whole seconds, rounded up, never negative: a client
// coming back after that many seconds finds the moment passed.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// setParams appends to b the structured field item v with its parameters
// named a (and, when withB, b2) set to va (vb): `"api";r=5;t=30` with r set
// to 12 is `"api";r=12;t=30`. Parameters v lacks are added; the item's
// other parameters and the rest of the list are kept as they were.
func setParams(b []byte, v string, a byte, va int64, b2 byte, vb int64, withB bool) []byte {
	doneA, doneB := false, !withB
	item, rest := v, ""
	if i := indexOutsideQuotes(v, ','); i >= 0 {
		item, rest = v[:i], v[i:]
	}
	for i := 0; i < len(item); {
		j := indexOutsideQuotes(item[i:], ';')
		part := item[i:]
		if j >= 0 {
			part = item[i : i+j]
		}
		if i > 0 {
			b = append(b, ';')
		}
		switch {
		case i > 0 && isParam(part, a):
			b = append(b, a, '=')
			b = strconv.AppendInt(b, va, 10)
			doneA = true
		case i > 0 && withB && isParam(part, b2):
			b = append(b, b2, '=')
			b = strconv.AppendInt(b, vb, 10)
			doneB = true
		default:
			b = append(b, part...)
		}
		if j < 0 {
			break
		}
		i += j + 1
	}
	if !doneA {
		b = append(b, ';', a, '=')
		b = strconv.AppendInt(b, va, 10)
	}
	if !doneB {
		b = append(b, ';', b2, '=')
		b = strconv.AppendInt(b, vb, 10)
	}
	return append(b, rest...)
}

// isParam reports whether part is the parameter name=... (spaces around
// the name allowed).
func isParam(part string, name byte) bool {
	k := 0
	for k < len(part) && part[k] == ' ' {
		k++
	}
	return k+1 < len(part) && part[k] == name && part[k+1] == '='
}

// indexOutsideQuotes is the index of the first c in s not inside a quoted
// string, or -1.
func indexOutsideQuotes(s string, c byte) int {
	quoted := false
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '\\' && quoted:
			i++
		case s[i] == '"':
			quoted = !quoted
		case s[i] == c && !quoted:
			return i
		}
	}
	return -1
}

// fieldWriter gathers an answer's new field values and applies them
// together, so that rewriting the fields costs two allocations (the
// values' text and their slices) whatever their number.
type fieldWriter struct {
	fields [maxFields]newField
	n      int
}

// maxFields is how many fields one answer may have replaced: those of
// the largest family, and Retry-After.
const maxFields = 6

// newField is one field's new value: a number, an HTTP date, or a
// structured field's item with parameters set.
type newField struct {
	name, upstream string
	how            valueKind
	v, v2          int64
	old            string
}

type valueKind uint8

const (
	valueInt     valueKind = iota
	valueDate              // v as an HTTP date
	valueParamR            // old with r=v
	valueParamRT           // old with r=v, t=v2
	valueParamQ            // old with q=v
)

var retryAfter = rateLimitField{name: "Retry-After", upstream: HeaderUpstreamPrefix + "Retry-After"}

func (w *fieldWriter) put(rf *rateLimitField, how valueKind, v, v2 int64, old string) {
	if w.n == len(w.fields) {
		return
	}
	w.fields[w.n] = newField{name: rf.name, upstream: rf.upstream, how: how, v: v, v2: v2, old: old}
	w.n++
}

// apply moves each gathered field's server values to its upstream name
// and sets the new value.
func (w *fieldWriter) apply(h http.Header) {
	if w.n == 0 {
		return
	}
	var buf [256]byte
	text := buf[:0]
	var ends [maxFields]int
	for i := range w.n {
		f := &w.fields[i]
		switch f.how {
		case valueInt:
			text = strconv.AppendInt(text, f.v, 10)
		case valueDate:
			text = time.Unix(f.v, 0).UTC().AppendFormat(text, http.TimeFormat)
		case valueParamR:
			text = setParams(text, f.old, 'r', f.v, 0, 0, false)
		case valueParamRT:
			text = setParams(text, f.old, 'r', f.v, 't', f.v2, true)
		case valueParamQ:
			text = setParams(text, f.old, 'q', f.v, 0, 0, false)
		}
		ends[i] = len(text)
	}
	all := string(text)
	vals := make([]string, w.n)
	start := 0
	for i := range w.n {
		f := &w.fields[i]
		vals[i] = all[start:ends[i]]
		start = ends[i]
		if old := h[f.name]; old != nil {
			h[f.upstream] = old
		}
		h[f.name] = vals[i : i+1 : i+1]
	}
}

// poolWait is how long until the soonest credential of the pool could
// send the request again, from the quota state: the wait a refusal that
// reaches the caller (its retries spent) tells it in Retry-After. It reads
// the whole state, which only such a refusal pays for.
func (x *exchange) poolWait(now time.Time) (time.Duration, bool) {
	t, l := x.t, x.l
	buckets, owners, err := t.stored(context.WithoutCancel(x.ctx))
	if err != nil {
		return 0, false
	}
	ask := l.ask(x.class)
	best, found := time.Duration(0), false
	for _, c := range x.pool.Eligible(now) {
		sl := l.slot(c, x.class)
		b, ok := buckets[sl.Bucket]
		if !ok {
			b = quota.NewBucket()
		}
		o := owners[sl.Owner]
		if w := quota.Wait(&o, &b, &ask, now); !found || w < best {
			best, found = w, true
		}
	}
	return best, found
}
