package headers

import (
	"net/http"
	"strings"
	"time"
)

// DefaultWait is the wait Parse asks for when a response says the next
// request would be refused but not for how long (a rate-limit refusal with
// no Retry-After and no reset, or no quota left with no reset), and the
// floor GitHub documents for a secondary limit without retry-after.
const DefaultWait = 60 * time.Second

// maxGroups bounds how many distinct buckets one response may describe;
// the rest are ignored, so a hostile response cannot make Parse do much.
const maxGroups = 12

// maxUsed bounds the header names listed in HeadersUsed.
const maxUsed = 32

// group is one bucket a response describes: the unqualified x-ratelimit-*
// headers, one qualifier of per-kind headers, or one IETF policy.
type group struct {
	name      string
	limit     int64
	remaining int64
	used      int64
	reset     time.Time
	window    time.Duration
	resource  string
	otherUnit bool // IETF quota unit other than requests: not a request count
	ietf      bool
	// resetDelay: reset was stated as a delay from now, not an instant.
	resetDelay bool
}

// laterReset keeps t as the group's reset when it is the later; delay
// says it was stated as a delay from now.
func (g *group) laterReset(t time.Time, delay bool) {
	if g.reset.IsZero() || t.After(g.reset) {
		g.reset, g.resetDelay = t, delay
	}
}

// parser is the state of one Parse call; it lives on the stack.
type parser struct {
	now     time.Time
	groups  [maxGroups]group
	ngroups int

	retryAfter    time.Duration
	hasRetryAfter bool
	// The millisecond forms (retry-after-ms) apart: they are exact, and
	// win over a Retry-After that can only round up to whole seconds.
	retryAfterExact    time.Duration
	hasRetryAfterExact bool

	used  [maxUsed]string
	nused int

	github, gitlab, legacy, discord, qualified, ietf bool
}

func (p *parser) markUsed(name string) {
	for i := 0; i < p.nused; i++ {
		if p.used[i] == name {
			return
		}
	}
	if p.nused < maxUsed {
		p.used[p.nused] = name
		p.nused++
	}
}

// group returns the bucket named name, creating it; nil when there are
// already too many.
func (p *parser) group(name string) *group {
	for i := 0; i < p.ngroups; i++ {
		if p.groups[i].name == name {
			return &p.groups[i]
		}
	}
	if p.ngroups == maxGroups {
		return nil
	}
	g := &p.groups[p.ngroups]
	p.ngroups++
	*g = group{name: name, limit: UnknownCount, remaining: UnknownCount, used: UnknownCount, window: qualifierWindow(name)}
	return g
}

// qualifierWindow reads the window of per-period headers such as
// x-ratelimit-limit-minute.
func qualifierWindow(q string) time.Duration {
	switch q {
	case "second", "secondly":
		return time.Second
	case "minute", "minutely":
		return time.Minute
	case "hour", "hourly":
		return time.Hour
	case "day", "daily":
		return 24 * time.Hour
	case "week", "weekly":
		return 7 * 24 * time.Hour
	}
	return 0
}

// foldCounts reads every value as a count (roundUp as parseCount takes
// it) and folds each into *into, the least or the most of them as fold
// says; it reports whether any value was one.
func foldCounts(values []string, roundUp bool, into *int64, fold func(cur, v int64) int64) bool {
	return eachValue(values, func(s string) bool {
		v, ok := parseCount(s, roundUp)
		if ok {
			*into = fold(*into, v)
		}
		return ok
	})
}

// The conservative merges of repeated values: the least limit and
// remaining, the most used, the latest reset, the longest retry-after.
func minCount(cur, v int64) int64 {
	if cur == UnknownCount || v < cur {
		return v
	}
	return cur
}

func maxCount(cur, v int64) int64 {
	if cur == UnknownCount || v > cur {
		return v
	}
	return cur
}

func (p *parser) addRetryAfter(d time.Duration, millis bool) {
	if millis {
		if !p.hasRetryAfterExact || d > p.retryAfterExact {
			p.retryAfterExact = d
		}
		p.hasRetryAfterExact = true
		return
	}
	if !p.hasRetryAfter || d > p.retryAfter {
		p.retryAfter = d
	}
	p.hasRetryAfter = true
}

// Parse reads what a response says about rate limits. status is the HTTP
// status code, h the response header, body the first few kilobytes of the
// body (nil is fine; it is only read on refusals, to tell GitHub's
// secondary limits apart and to find a JSON retry_after), and now the time
// the response was received, on whatever clock the caller wants the
// reading's absolute times on.
//
// Parse never fails and never panics: headers it cannot read are ignored.
// The package documentation lists every rule it applies.
func Parse(status int, h http.Header, body []byte, now time.Time) Reading {
	return parse(status, h, body, now, "")
}

// ParseFor is Parse for a request paced by one of the buckets a response
// describes, named by its qualifier ("tokens", "output-tokens"): the
// reading reports that bucket when the response describes it, unless it
// refuses the request naming another limit.
func ParseFor(status int, h http.Header, body []byte, now time.Time, bucket string) Reading {
	return parse(status, h, body, now, bucket)
}

func parse(status int, h http.Header, body []byte, now time.Time, prefer string) Reading {
	p := parser{now: now}
	r := Reading{Status: status, Limit: UnknownCount, Remaining: UnknownCount, Used: UnknownCount}
	var rateLimit, ratePolicy []string

	for name, values := range h {
		info := lookupName(name)
		if info.field == fNone || len(values) == 0 {
			continue
		}
		if info.field == fGitHubMarker {
			p.github = true
			continue
		}
		if p.read(info, values, &r) {
			p.markUsed(info.lower)
		}
		switch info.field {
		case fStructured:
			rateLimit = values
		case fStructuredPolicy:
			ratePolicy = values
		}
	}
	if rateLimit != nil || ratePolicy != nil {
		if p.readStructured(rateLimit, ratePolicy) {
			p.ietf = true
		}
	}

	sig := inspectBody(status, body)
	g := p.choose()
	if prefer != "" {
		if pg := p.named(prefer); pg != nil {
			g = pg
		}
	}
	named := false
	if sig.limit != "" {
		// A refusal that names the limit it hit (OpenAI's "type":
		// "tokens", Anthropic's "input tokens per minute") is that
		// limit's, whichever has the least left in its own units.
		if ng := p.named(sig.limit); ng != nil {
			g, named = ng, true
		}
	}
	if g != nil {
		r.Limit, r.Remaining, r.Used = g.limit, g.remaining, g.used
		r.Reset, r.Window, r.Resource = g.reset, g.window, g.resource
		if r.Resource == "" && g.name != "" {
			r.Resource = g.name
		}
		resolveContradictions(&r)
	}
	r.RetryAfter, r.HasRetryAfter = p.retryAfter, p.hasRetryAfter
	if p.hasRetryAfterExact {
		r.RetryAfter, r.HasRetryAfter = p.retryAfterExact, true
	}
	if sig.github {
		p.github = true
	}
	if !r.HasRetryAfter && sig.hasRetryAfter {
		r.RetryAfter, r.HasRetryAfter = sig.retryAfter, true
	}
	sig.page = status == http.StatusForbidden && isPage(h, body)
	r.Limited = classifyRefusal(status, &r, sig)
	if named && r.Limited == Secondary && !sig.secondary {
		// Its own bucket refused: with some left, but less than the
		// request costs in its units (tokens).
		r.Limited = Primary
	}
	if g != nil && r.HasReset() && !r.ServerTime.IsZero() && r.Reset.Equal(g.reset) {
		r.ServerReset = g.reset
		if g.resetDelay {
			r.ServerReset = r.ServerTime.Add(g.reset.Sub(now))
		}
	}
	r.Wait = wait(&r, now)
	r.Dialect = p.dialect(&r)
	if p.nused > 0 {
		r.HeadersUsed = make([]string, p.nused)
		copy(r.HeadersUsed, p.used[:p.nused])
		sortStrings(r.HeadersUsed)
	}
	return r
}

// read applies one header's values; it reports whether any value was
// usable.
func (p *parser) read(info nameInfo, values []string, r *Reading) bool {
	switch info.field {
	case fRetryAfter, fRetryAfterMillis, fFamilyRetryAfter, fDate, fPollInterval:
		return p.readResponseWide(info, values, r)
	case fStructured, fStructuredPolicy:
		return false // read together once every header has been seen
	}
	g := p.group(info.qual)
	if g == nil {
		return false
	}
	ok := p.readBucket(g, info, values)
	if ok {
		p.noteFamily(info)
	}
	return ok
}

// unit is what a bare delta value of the header counts.
func (info nameInfo) unit() time.Duration {
	if info.millis {
		return time.Millisecond
	}
	return time.Second
}

// readResponseWide reads the headers that speak for the whole response
// rather than for one bucket: the retry-after family, Date and
// X-Poll-Interval. Each merges conservatively into r or the parser.
func (p *parser) readResponseWide(info nameInfo, values []string, r *Reading) bool {
	now := p.now
	switch info.field {
	case fDate:
		// A response has one Date; of repeated ones the first is read.
		return eachValue(values[:1], func(s string) bool {
			t, ok := parseDate(cleanValue(s))
			if ok {
				r.ServerTime = t
			}
			return ok
		})
	case fPollInterval:
		return eachValue(values, func(s string) bool {
			v, ok := parseNumber(s)
			if ok {
				if d := secondsToDuration(v); d > r.PollInterval {
					r.PollInterval = d
				}
			}
			return ok
		})
	}
	unit := info.unit()
	return eachValue(values, func(s string) bool {
		d, ok := parseDelay(s, now, unit)
		if ok {
			p.addRetryAfter(d, info.field == fRetryAfterMillis)
		}
		return ok
	})
}

// readBucket reads a header that describes one bucket into g.
func (p *parser) readBucket(g *group, info nameInfo, values []string) bool {
	switch info.field {
	case fCallLimit:
		return p.readCallLimit(g, values)
	case fQualifierOnly:
		return p.readQualifierOnly(g, values)
	case fLimit:
		ok := foldCounts(values, false, &g.limit, minCount)
		if w := windowParam(values); w > 0 && g.window == 0 {
			g.window = w
		}
		return ok
	case fRemaining:
		return foldCounts(values, false, &g.remaining, minCount)
	case fUsed:
		return foldCounts(values, true, &g.used, maxCount)
	case fReset, fResetAfter:
		return p.readReset(g, info, values)
	case fResource:
		return p.readResource(g, info, values)
	}
	return false
}

// readReset reads a reset header: an instant by the bare-number rule, or,
// for the reset-after form, always a delay from now (which only Discord
// sends).
func (p *parser) readReset(g *group, info nameInfo, values []string) bool {
	now, unit := p.now, info.unit()
	ok := eachValue(values, func(s string) bool {
		var t time.Time
		var ok bool
		delay := true
		if info.field == fResetAfter {
			var d time.Duration
			if d, ok = parseDelay(s, now, unit); ok {
				t = now.Add(d)
			}
		} else {
			t, delay, ok = parseInstantOrDelay(s, now, unit)
		}
		if ok {
			g.laterReset(t, delay)
		}
		return ok
	})
	if ok && info.field == fResetAfter {
		p.discord = true
	}
	return ok
}

// readResource reads the bucket's name. Of several, the least in byte
// order is kept, so the header order cannot change the reading.
func (p *parser) readResource(g *group, info nameInfo, values []string) bool {
	ok := false
	for _, v := range values {
		v = cleanValue(v)
		if v != "" && len(v) <= 128 && (g.resource == "" || v < g.resource) {
			g.resource = v
			ok = true
		}
	}
	// Of the names this field has, these two are each one dialect's.
	if ok && info.lower == "x-ratelimit-bucket" {
		p.discord = true
	}
	if ok && info.lower == "x-ratelimit-resource" {
		p.github = true
	}
	return ok
}

// noteFamily records which family of names a usable bucket header came
// from, for the reading's Dialect.
func (p *parser) noteFamily(info nameInfo) {
	switch {
	case info.gitlab:
		p.gitlab = true
	case info.qual != "":
		p.qualified = true
	case info.legacy:
		p.legacy = true
	}
}

// readCallLimit reads Shopify's "used/limit" leaky-bucket header.
func (p *parser) readCallLimit(g *group, values []string) bool {
	ok := false
	for _, v := range values {
		usedStr, limStr, found := strings.Cut(cleanValue(v), "/")
		if !found {
			continue
		}
		used, ok1 := parseCount(usedStr, true)
		lim, ok2 := parseCount(limStr, false)
		if !ok1 || !ok2 {
			continue
		}
		g.used = maxCount(g.used, used)
		g.limit = minCount(g.limit, lim)
		rem := lim - used
		if rem < 0 {
			rem = 0
		}
		g.remaining = minCount(g.remaining, rem)
		ok = true
	}
	return ok
}

// readQualifierOnly reads a family header that has a bucket qualifier but
// no field word. Its value is either "key=value" pairs, as in Zendesk's
// zendesk-ratelimit-tickets-index: total=100; remaining=99; resets=8, or,
// for a period qualifier (HubSpot's x-hubspot-ratelimit-daily: 250000),
// the limit of that period.
func (p *parser) readQualifierOnly(g *group, values []string) bool {
	ok := false
	for _, v := range values {
		if strings.IndexByte(v, '=') < 0 {
			if g.window == 0 {
				continue
			}
			if n, good := parseCount(v, false); good {
				g.limit = minCount(g.limit, n)
				ok = true
			}
			continue
		}
		for _, part := range strings.FieldsFunc(v, func(r rune) bool { return r == ';' || r == ',' }) {
			k, val, found := strings.Cut(part, "=")
			if !found {
				continue
			}
			switch strings.ToLower(strings.TrimSpace(k)) {
			case "total", "limit", "max":
				if n, good := parseCount(val, false); good {
					g.limit, ok = minCount(g.limit, n), true
				}
			case "remaining":
				if n, good := parseCount(val, false); good {
					g.remaining, ok = minCount(g.remaining, n), true
				}
			case "used":
				if n, good := parseCount(val, true); good {
					g.used, ok = maxCount(g.used, n), true
				}
			case "reset", "resets":
				if t, delay, good := parseInstantOrDelay(val, p.now, time.Second); good {
					g.laterReset(t, delay)
					ok = true
				}
			}
		}
	}
	return ok
}

// windowParam reads the ";w=" window parameter the earlier IETF drafts
// (and Docker Hub) attach to limit values: "100;w=21600".
func windowParam(values []string) time.Duration {
	for _, v := range values {
		i := strings.Index(v, ";w=")
		if i < 0 {
			continue
		}
		rest := v[i+3:]
		if j := strings.IndexAny(rest, ";, "); j >= 0 {
			rest = rest[:j]
		}
		if n, ok := parseNumber(rest); ok && n > 0 && n < epochSecondsMin {
			return secondsToDuration(n)
		}
	}
	return 0
}

// choose picks the most restrictive bucket: the one with the least
// remaining; among equals, the one that resets last; then the unqualified
// one, then by name. Buckets counted in units other than requests (IETF
// qu=content-bytes...) only count when they are used up.
func (p *parser) choose() *group {
	var best *group
	for i := 0; i < p.ngroups; i++ {
		g := &p.groups[i]
		if g.remaining == UnknownCount || (g.otherUnit && g.remaining != 0) {
			continue
		}
		if best == nil || moreRestrictive(g, best) {
			best = g
		}
	}
	if best != nil {
		return best
	}
	// Nothing states what is left: report the bucket with the least
	// limit, or failing that one with a reset.
	for i := 0; i < p.ngroups; i++ {
		g := &p.groups[i]
		if g.otherUnit || g.empty() {
			continue
		}
		if best == nil || g.limit != UnknownCount && (best.limit == UnknownCount || g.limit < best.limit) ||
			g.limit == best.limit && g.name < best.name {
			best = g
		}
	}
	return best
}

// named is the bucket a refusal's body names (a qualifier such as
// "tokens" or "input-tokens") when the headers describe it, else nil.
func (p *parser) named(name string) *group {
	for i := 0; i < p.ngroups; i++ {
		if g := &p.groups[i]; g.name == name && !g.empty() && !g.otherUnit {
			return g
		}
	}
	return nil
}

// empty reports whether the bucket was named but nothing usable was read.
func (g *group) empty() bool {
	return g.limit == UnknownCount && g.remaining == UnknownCount && g.used == UnknownCount && g.reset.IsZero()
}

func moreRestrictive(a, b *group) bool {
	if a.remaining != b.remaining {
		return a.remaining < b.remaining
	}
	if !a.reset.Equal(b.reset) {
		return a.reset.After(b.reset)
	}
	return a.name < b.name
}

// resolveContradictions makes the counts agree, conservatively: nothing
// left beyond the limit, nor beyond limit minus used.
func resolveContradictions(r *Reading) {
	if r.Limit == UnknownCount || r.Remaining == UnknownCount {
		return
	}
	if r.Remaining > r.Limit {
		r.Remaining = r.Limit
	}
	if r.Used != UnknownCount && r.Used <= r.Limit && r.Remaining > r.Limit-r.Used {
		r.Remaining = r.Limit - r.Used
	}
}

// classifyRefusal decides whether the response refused the request for rate
// limiting, and which limit did.
func classifyRefusal(status int, r *Reading, sig bodySignal) Limited {
	refused := false
	switch status {
	case http.StatusTooManyRequests, 420: // 420: Twitter's old "Enhance Your Calm"
		refused = true
	case http.StatusForbidden:
		// A 403 is a permission error unless something says rate limit,
		// or it says nothing at all in a page that is not the API's own
		// error: a proxy or an abuse filter refused it.
		refused = r.Remaining == 0 || sig.rateLimited || sig.secondary || r.HasRetryAfter ||
			sig.page && statesNoCount(r)
	default:
		refused = sig.rateLimited && status == http.StatusOK // GraphQL RATE_LIMITED
	}
	switch {
	case !refused:
		return NotLimited
	case sig.secondary:
		return Secondary
	case r.Remaining > 0 && status != http.StatusOK:
		// The headers describe a quota that still has room, so what
		// refused the request is some other limit. (GraphQL's
		// RATE_LIMITED comes with points left that do not pay for the
		// query: its own budget refused it.)
		return Secondary
	case status != http.StatusOK && statesNoCount(r) && sig.limit == "" && (status != http.StatusForbidden || sig.page || !sig.rateLimited):
		// Nothing said of any quota: not a sign that one is spent. (A
		// 403 whose body is the API's own rate-limit message, not a
		// page, says what it is; so does a body naming the limit that
		// refused, such as OpenAI's "type": "requests".)
		return Bare
	default:
		return Primary
	}
}

// statesNoCount reports a reading with no count and no reset: nothing said
// of any quota (a Retry-After may still be there).
func statesNoCount(r *Reading) bool {
	return r.Limit == UnknownCount && r.Remaining == UnknownCount && r.Used == UnknownCount && !r.HasReset()
}

// wait is the least wait before the next request on this reading alone.
func wait(r *Reading, now time.Time) time.Duration {
	untilReset := time.Duration(-1)
	if r.HasReset() {
		untilReset = r.Reset.Sub(now)
		if untilReset < 0 {
			untilReset = 0
		}
	}
	switch {
	case r.HasRetryAfter:
		// RFC 9110 and the IETF RateLimit draft: Retry-After takes
		// precedence over any reset.
		return r.RetryAfter
	case r.Limited == Secondary:
		// With nothing left, nothing goes before the reset either; but
		// the reset is the primary bucket's and names no end of the
		// secondary penalty, so a reset sooner than DefaultWait does
		// not shorten it (quota.Owner.Observe pauses alike).
		if r.Remaining == 0 {
			return max(untilReset, DefaultWait)
		}
		return DefaultWait
	case r.Limited == Bare:
		return DefaultWait
	case r.Limited == Primary || r.Remaining == 0:
		if untilReset >= 0 {
			return untilReset
		}
		return DefaultWait
	}
	return 0
}

func (p *parser) dialect(r *Reading) Dialect {
	switch {
	case p.github:
		return DialectGitHub
	case p.gitlab:
		return DialectGitLab
	case p.ietf:
		return DialectIETF
	case p.discord:
		return DialectDiscord
	case p.qualified:
		return DialectQualified
	case p.legacy:
		return DialectIETFOld
	case p.anyGroup():
		return DialectXRate
	case r.HasRetryAfter:
		return DialectRetry
	}
	return DialectNone
}

func (p *parser) anyGroup() bool {
	for i := 0; i < p.ngroups; i++ {
		if !p.groups[i].empty() {
			return true
		}
	}
	return false
}

// sortStrings is an insertion sort: HeadersUsed is short, and sort.Strings
// would allocate.
func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}
