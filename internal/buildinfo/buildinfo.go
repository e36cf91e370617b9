// Package buildinfo says which ratekeeper a binary is: its module version,
// the commit it was built from, when, and with which Go. The facts come
// from the build information Go stamps into every binary
// (runtime/debug.ReadBuildInfo); Of is a pure function of them, so that
// `ratekeeper version`, `--version` and the ratekeeper_build_info metric
// say the same thing and a test can feed it any build.
package buildinfo

import (
	"fmt"
	"runtime/debug"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Module is ratekeeper's module path: the main module of the command, a
// dependency of a program that uses the library.
const Module = "github.com/ratekeeper/ratekeeper"

// Info is what a binary knows of the ratekeeper it holds. A fact the build
// did not record is empty (a build outside a Git checkout has no commit).
type Info struct {
	// Version is the module version: v1.2.3 when installed with
	// go install …@v1.2.3, a pseudo-version such as
	// v0.0.0-20261206201500-0123456789ab+dirty when built in a checkout,
	// "(devel)" when Go could not tell.
	Version string
	// Commit is the Git revision built (vcs.revision).
	Commit string
	// Modified says the checkout had changes not committed (vcs.modified).
	Modified bool
	// Time is the commit's time (vcs.time), the best date a reproducible
	// build has; zero when unknown.
	Time time.Time
	// GoVersion is the Go toolchain that built the binary (go1.26.8).
	GoVersion string
}

// Of reads the facts from a binary's build information; a nil bi (a binary
// built without module support) gives an Info with every fact unknown.
// When the main module is not ratekeeper (a program using the library),
// the version is the dependency's and there is no commit of ratekeeper's.
func Of(bi *debug.BuildInfo) Info {
	if bi == nil {
		return Info{}
	}
	info := Info{GoVersion: bi.GoVersion}
	if bi.Main.Path != Module {
		for _, d := range bi.Deps {
			if d.Path == Module {
				info.Version = d.Version
				if d.Replace != nil && d.Replace.Version != "" {
					info.Version = d.Replace.Version
				}
			}
		}
		return info
	}
	info.Version = bi.Main.Version
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			info.Commit = s.Value
		case "vcs.modified":
			info.Modified = s.Value == "true"
		case "vcs.time":
			if t, err := time.Parse(time.RFC3339, s.Value); err == nil {
				info.Time = t.UTC()
			}
		}
	}
	return info
}

// Read returns the running binary's Info.
func Read() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Info{}
	}
	return Of(bi)
}

// unknown is what a fact the build did not record reads as.
const unknown = "unknown"

func orUnknown(s string) string {
	if s == "" {
		return unknown
	}
	return s
}

// CommitLabel is the commit as one word: the revision, with "-dirty" when
// the checkout had uncommitted changes, "unknown" when not recorded.
func (i Info) CommitLabel() string {
	if i.Commit == "" {
		return unknown
	}
	if i.Modified {
		return i.Commit + "-dirty"
	}
	return i.Commit
}

// String is every fact, a line each, as `ratekeeper version` prints them.
func (i Info) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "ratekeeper %s\n", orUnknown(i.Version))
	commit := i.Commit
	if commit == "" {
		commit = unknown
	} else if i.Modified {
		commit += " (modified: built with changes not committed)"
	}
	fmt.Fprintf(&b, "commit:  %s\n", commit)
	date := unknown
	if !i.Time.IsZero() {
		date = i.Time.Format(time.RFC3339) + " (the commit's time)"
	}
	fmt.Fprintf(&b, "date:    %s\n", date)
	fmt.Fprintf(&b, "go:      %s\n", orUnknown(i.GoVersion))
	return b.String()
}

// MetricName is the gauge that names the build on every /metrics, so that
// a dashboard shows a fleet running mixed versions.
const MetricName = "ratekeeper_build_info"

// Collector returns the ratekeeper_build_info gauge for i: always 1, with
// the version, commit and Go version as labels.
func Collector(i Info) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: MetricName,
		Help: "Always 1; its labels name the ratekeeper build: module version, commit (-dirty when built with uncommitted changes) and Go version.",
		ConstLabels: prometheus.Labels{
			"version":    orUnknown(i.Version),
			"commit":     i.CommitLabel(),
			"go_version": orUnknown(i.GoVersion),
		},
	})
	g.Set(1)
	return g
}
