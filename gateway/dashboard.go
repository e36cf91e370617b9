package gateway

import (
	"bytes"
	"embed"
	"fmt"
	"github.com/dustin/go-humanize"
	"html/template"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/ratekeeper/ratekeeper/transport"
)

// The dashboard is server-rendered from one template; its stylesheet,
// script and icon are embedded too, so it works offline and loads nothing
// from elsewhere (the Content-Security-Policy says so to the browser).
//
//go:embed web/dashboard.html
var dashboardHTML string

//go:embed web/assets
var assetFS embed.FS

// contentSecurityPolicy allows only the gateway's own assets.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

func parseDashboard() (*template.Template, error) {
	return template.New("dashboard").Funcs(template.FuncMap{
		"rfc3339": func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
		"clock":   func(t time.Time) string { return t.UTC().Format("15:04") },
		"lower":   strings.ToLower,
	}).Parse(dashboardHTML)
}

// dashboardData is what the template renders.
type dashboardData struct {
	Now          time.Time
	Started      time.Time
	Uptime       string
	PassThrough  bool
	KeysRequired bool
	MaxWait      string
	Providers    []providerView
	Chart        chartView
	Totals       Minute
}

type providerView struct {
	Name, Base, Route string
	Credentials       int
	Anonymous         bool // no token: the server's anonymous limits
	// Health and Summary are the provider's overall line (see
	// transport.ProviderSummary): "core 9,210/10,000, resets in 34m".
	Health, HealthClass, Summary string
	Rows                         []rowView
}

// rowView is one (credential, resource) line; a credential without known
// buckets has one line with an empty Resource.
type rowView struct {
	First                     bool // the credential's first row
	Credential, Owner         string
	State, Reason             string
	Resource                  string
	Remaining, Limit, Percent string
	MeterValue, MeterMax      int64
	MeterLow, MeterHigh       float64 // the meter turns amber under 20 % and red under 5 %, as Health does
	HasMeter                  bool
	Reset                     string // RFC 3339, "" when unknown
	ResetsIn                  string
	Health, HealthClass       string
	Assumed                   bool
}

// chartView is the requests-and-waits chart of the last hour, drawn as SVG
// by the template from these precomputed shapes.
type chartView struct {
	Width, Height       int
	PlotTop, PlotBottom int
	Left, Right         int // the plot's horizontal extent
	Max                 int64
	Bars                []barView
	Ticks               []tickView
}

type barView struct {
	X, W                 float64
	ReqY, ReqH           float64
	WaitX, WaitW         float64
	WaitY, WaitH         float64
	RefusedY             float64
	Refused              bool
	Title                string
	Requests, Waits, Ref int64
}

type tickView struct {
	X     float64
	Label string
}

func (g *Gateway) serveDashboard(w http.ResponseWriter, r *http.Request) {
	if !g.onlyGet(w, r) || !g.authorized(w, r, true, "Basic", nil) {
		return
	}
	rep, err := g.Report(r.Context())
	if err != nil {
		g.log.Warn("dashboard status", "err", err)
		writeJSON(w, http.StatusInternalServerError, errorBody{Error: "status", Message: "reading quota state: " + err.Error()})
		return
	}
	data := g.dashboardData(rep)
	var buf bytes.Buffer
	if err := g.dashboard.Execute(&buf, data); err != nil {
		g.log.Warn("dashboard template", "err", err)
		writeJSON(w, http.StatusInternalServerError, errorBody{Error: "dashboard", Message: "rendering the dashboard failed"})
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(buf.Len()))
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(buf.Bytes())
	}
}

// summaryText is a provider's main resource in its overall line.
func summaryText(ps transport.ProviderSummary) string {
	if ps.Remaining == nil {
		return ps.Resource + " not known yet"
	}
	s := ps.Resource + " " + humanize.Comma(*ps.Remaining)
	if ps.Limit != nil {
		s += "/" + humanize.Comma(*ps.Limit)
	}
	if ps.ResetsIn != nil {
		s += ", resets in " + humanDuration(time.Duration(*ps.ResetsIn*float64(time.Second)))
	}
	return s
}

func (g *Gateway) dashboardData(rep transport.StatusReport) dashboardData {
	now := rep.GeneratedAt
	d := dashboardData{
		Now: now, Started: g.started, Uptime: humanDuration(now.Sub(g.started)),
		PassThrough: g.pt != nil, KeysRequired: g.opts.Keys.Len() > 0,
		MaxWait: g.maxWait.String(),
	}
	byProvider := map[string]*providerView{}
	for _, name := range g.names {
		p := g.routes[name]
		d.Providers = append(d.Providers, providerView{Name: name, Base: g.bases[name].String(), Route: "/" + p.Name + "/"})
	}
	for i := range d.Providers {
		byProvider[d.Providers[i].Name] = &d.Providers[i]
	}
	for _, ps := range rep.Providers {
		if pv := byProvider[ps.Provider]; pv != nil {
			pv.Health, pv.HealthClass, pv.Summary = ps.Health, strings.ToLower(ps.Health), summaryText(ps)
			pv.Anonymous = ps.Anonymous
		}
	}
	for _, c := range rep.Credentials {
		pv := byProvider[c.Provider]
		if pv == nil {
			continue
		}
		pv.Credentials++
		base := rowView{Credential: c.Credential, Owner: c.Owner, State: c.State, Reason: c.Reason}
		if len(c.Resources) == 0 {
			row := base
			row.First = true
			row.Remaining, row.Limit, row.ResetsIn, row.Health, row.HealthClass = "?", "?", "—", "UNKNOWN", "unknown"
			pv.Rows = append(pv.Rows, row)
			continue
		}
		for i, rs := range c.Resources {
			row := base
			row.First = i == 0
			row.Resource = rs.Resource
			if rs.Origin != "" {
				// A scope's limit nobody announced: say where it
				// comes from.
				row.Resource += " (" + rs.Origin + ")"
			}
			row.Remaining, row.Limit, row.Percent = "?", "?", ""
			if rs.Remaining != nil {
				row.Remaining = strconv.FormatInt(*rs.Remaining, 10)
			}
			if rs.Limit != nil {
				row.Limit = strconv.FormatInt(*rs.Limit, 10)
			}
			if rs.Remaining != nil && rs.Limit != nil && *rs.Limit > 0 {
				row.HasMeter = true
				row.MeterValue, row.MeterMax = max(*rs.Remaining, 0), *rs.Limit
				row.MeterLow, row.MeterHigh = float64(*rs.Limit)*0.05, float64(*rs.Limit)*0.2
			}
			if rs.Percent != nil {
				row.Percent = fmt.Sprintf("%.0f%%", *rs.Percent)
			}
			row.ResetsIn = "—"
			if rs.Reset != nil && rs.ResetsIn != nil {
				row.Reset = rs.Reset.UTC().Format(time.RFC3339)
				row.ResetsIn = humanDuration(time.Duration(*rs.ResetsIn * float64(time.Second)))
			}
			row.Health, row.HealthClass = rs.Health, strings.ToLower(rs.Health)
			row.Assumed = rs.Assumed
			pv.Rows = append(pv.Rows, row)
		}
	}
	minutes := g.history.Last(now)
	for _, m := range minutes {
		d.Totals.Requests += m.Requests
		d.Totals.Waits += m.Waits
		d.Totals.WaitSeconds += m.WaitSeconds
		d.Totals.Refused += m.Refused
		d.Totals.Coalesced += m.Coalesced
		d.Totals.Cached += m.Cached
	}
	d.Chart = buildChart(minutes)
	return d
}

// buildChart lays out one bar pair per minute: requests (full width) and,
// inside it, the requests that waited for quota; a dot above a bar marks
// 429s given for quota beyond the max wait.
func buildChart(minutes []Minute) chartView {
	c := chartView{Width: 720, Height: 200, PlotTop: 16, PlotBottom: 176, Left: 44, Right: 700}
	for _, m := range minutes {
		c.Max = max(c.Max, m.Requests, m.Waits)
	}
	scale := 1.0
	if c.Max > 0 {
		scale = float64(c.PlotBottom-c.PlotTop) / float64(c.Max)
	}
	slot := float64(c.Right-c.Left) / float64(len(minutes))
	for i, m := range minutes {
		x := float64(c.Left) + float64(i)*slot
		b := barView{X: x + 1, W: slot - 2, Requests: m.Requests, Waits: m.Waits, Ref: m.Refused, Refused: m.Refused > 0}
		b.ReqH = float64(m.Requests) * scale
		b.ReqY = float64(c.PlotBottom) - b.ReqH
		b.WaitX, b.WaitW = x+slot*0.25, slot*0.5
		b.WaitH = float64(m.Waits) * scale
		b.WaitY = float64(c.PlotBottom) - b.WaitH
		b.RefusedY = b.ReqY - 5
		b.Title = fmt.Sprintf("%s UTC: %d requests, %d waited for quota (%.1f s), %d refused (429), %d coalesced, %d from the cache",
			m.Start.Format("15:04"), m.Requests, m.Waits, m.WaitSeconds, m.Refused, m.Coalesced, m.Cached)
		c.Bars = append(c.Bars, b)
	}
	for _, i := range []int{0, 15, 30, 45, len(minutes) - 1} {
		if i < len(minutes) {
			c.Ticks = append(c.Ticks, tickView{X: float64(c.Left) + float64(i)*slot + slot/2, Label: minutes[i].Start.Format("15:04")})
		}
	}
	return c
}

// humanDuration writes d as "1h 02m", "4m 05s" or "12s".
func humanDuration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	s := int64(d.Round(time.Second) / time.Second)
	switch {
	case s >= 3600:
		return fmt.Sprintf("%dh %02dm", s/3600, s%3600/60)
	case s >= 60:
		return fmt.Sprintf("%dm %02ds", s/60, s%60)
	}
	return fmt.Sprintf("%ds", s)
}

// serveAsset serves an embedded file of web/assets.
func serveAsset(w http.ResponseWriter, r *http.Request, name string) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeJSON(w, http.StatusMethodNotAllowed, errorBody{Error: "method", Message: "assets answer GET and HEAD only"})
		return
	}
	b, err := fs.ReadFile(assetFS, "web/assets/"+name)
	if err != nil || name == "" || strings.Contains(name, "/") {
		writeJSON(w, http.StatusNotFound, errorBody{Error: "not_found", Message: "no such asset"})
		return
	}
	h := w.Header()
	ctype := mime.TypeByExtension(path.Ext(name))
	if ctype == "" {
		ctype = "application/octet-stream"
	}
	h.Set("Content-Type", ctype)
	h.Set("Content-Length", strconv.Itoa(len(b)))
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "public, max-age=300")
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(b)
	}
}
