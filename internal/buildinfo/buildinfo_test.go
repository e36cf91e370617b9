package buildinfo

import (
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func checkout(modified string) *debug.BuildInfo {
	return &debug.BuildInfo{
		GoVersion: "go1.26.8",
		Main:      debug.Module{Path: Module, Version: "v0.0.0-20261206201500-0123456789ab+dirty"},
		Settings: []debug.BuildSetting{
			{Key: "-compiler", Value: "gc"},
			{Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
			{Key: "vcs.time", Value: "2026-12-06T20:15:00Z"},
			{Key: "vcs.modified", Value: modified},
		},
	}
}

func TestOfACheckout(t *testing.T) {
	got := Of(checkout("true"))
	want := Info{
		Version:   "v0.0.0-20261206201500-0123456789ab+dirty",
		Commit:    "0123456789abcdef0123456789abcdef01234567",
		Modified:  true,
		Time:      time.Date(2026, 12, 6, 20, 15, 0, 0, time.UTC),
		GoVersion: "go1.26.8",
	}
	if got != want {
		t.Fatalf("Of = %+v\nwant %+v", got, want)
	}
	wantText := `ratekeeper v0.0.0-20261206201500-0123456789ab+dirty
commit:  0123456789abcdef0123456789abcdef01234567 (modified: built with changes not committed)
date:    2026-12-06T20:15:00Z (the commit's time)
go:      go1.26.8
`
	if s := got.String(); s != wantText {
		t.Errorf("String() =\n%s\nwant\n%s", s, wantText)
	}
	if c := Of(checkout("false")).CommitLabel(); c != "0123456789abcdef0123456789abcdef01234567" {
		t.Errorf("an unmodified checkout's commit label = %q", c)
	}
	if c := got.CommitLabel(); c != "0123456789abcdef0123456789abcdef01234567-dirty" {
		t.Errorf("a modified checkout's commit label = %q", c)
	}
}

// An installed release has a version and no VCS settings (go install
// …@v1.2.3 builds from the module zip).
func TestOfAnInstalledRelease(t *testing.T) {
	got := Of(&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: Module, Version: "v1.2.3"}})
	if got.Version != "v1.2.3" || got.Commit != "" || !got.Time.IsZero() {
		t.Fatalf("Of = %+v", got)
	}
	s := got.String()
	for _, want := range []string{"ratekeeper v1.2.3\n", "commit:  unknown\n", "date:    unknown\n", "go:      go1.26.8\n"} {
		if !strings.Contains(s, want) {
			t.Errorf("String() = %q, want it to contain %q", s, want)
		}
	}
}

// In a program that uses the library, the version is the dependency's and
// the program's own commit is not ratekeeper's.
func TestOfALibraryUser(t *testing.T) {
	bi := checkout("false")
	bi.Main = debug.Module{Path: "example.com/app", Version: "(devel)"}
	bi.Deps = []*debug.Module{{Path: "golang.org/x/time", Version: "v0.9.0"}, {Path: Module, Version: "v1.4.0"}}
	if got := Of(bi); got.Version != "v1.4.0" || got.Commit != "" || got.GoVersion != "go1.26.8" {
		t.Fatalf("Of = %+v", got)
	}
	bi.Deps[1].Replace = &debug.Module{Path: "../ratekeeper"}
	if got := Of(bi); got.Version != "v1.4.0" {
		t.Errorf("a replacement by a directory changed the version: %+v", got)
	}
}

func TestOfNothing(t *testing.T) {
	if got := Of(nil); got != (Info{}) {
		t.Fatalf("Of(nil) = %+v", got)
	}
	if !strings.HasPrefix(Of(nil).String(), "ratekeeper unknown\n") {
		t.Errorf("String() = %q", Of(nil).String())
	}
}

func TestCollector(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(Collector(Of(checkout("true"))))
	want := `# HELP ratekeeper_build_info Always 1; its labels name the ratekeeper build: module version, commit (-dirty when built with uncommitted changes) and Go version.
# TYPE ratekeeper_build_info gauge
ratekeeper_build_info{commit="0123456789abcdef0123456789abcdef01234567-dirty",go_version="go1.26.8",version="v0.0.0-20261206201500-0123456789ab+dirty"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), MetricName); err != nil {
		t.Error(err)
	}
	reg = prometheus.NewRegistry()
	reg.MustRegister(Collector(Info{}))
	if err := testutil.GatherAndCompare(reg, strings.NewReader(strings.Replace(want, `commit="0123456789abcdef0123456789abcdef01234567-dirty",go_version="go1.26.8",version="v0.0.0-20261206201500-0123456789ab+dirty"`, `commit="unknown",go_version="unknown",version="unknown"`, 1)), MetricName); err != nil {
		t.Error(err)
	}
}
