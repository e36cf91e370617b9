package collectors

import (
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestDeclaredAsNamed(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	c := Counter("x_total", "Xs by kind.", "kind")
	g := Gauge("y", "The y.", "a", "b")
	h := Histogram("z_seconds", "Zs.", []float64{1, 2}, "kind")
	if err := Register(reg, c, g, h); err != nil {
		t.Fatal(err)
	}
	c.WithLabelValues("k").Add(2)
	g.WithLabelValues("1", "2").Set(3)
	h.WithLabelValues("k").Observe(1.5)
	want := `
# HELP x_total Xs by kind.
# TYPE x_total counter
x_total{kind="k"} 2
# HELP y The y.
# TYPE y gauge
y{a="1",b="2"} 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "x_total", "y"); err != nil {
		t.Error(err)
	}
	n, err := testutil.GatherAndCount(reg, "z_seconds")
	if err != nil || n != 1 {
		t.Errorf("histogram series: %d, %v", n, err)
	}
}

func TestRegisterRefusesATakenName(t *testing.T) {
	reg := prometheus.NewRegistry()
	if err := Register(reg, Counter("x_total", "X.")); err != nil {
		t.Fatal(err)
	}
	err := Register(reg, Gauge("y", "Y."), Counter("x_total", "X."), Gauge("z", "Z."))
	var are prometheus.AlreadyRegisteredError
	if !errors.As(err, &are) {
		t.Fatalf("a second x_total: %v, want AlreadyRegisteredError", err)
	}
	// It stops at the first failure: z was not registered.
	if err := Register(reg, Gauge("z", "Z.")); err != nil {
		t.Errorf("z was registered after the failure: %v", err)
	}
	if err := Register(nil, Counter("x_total", "X.")); err != nil {
		t.Errorf("nil registry: %v", err)
	}
}

func TestShareTakesOverTheFirstSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	var err error
	first := Share(reg, Counter("x_total", "X.", "kind"), &err)
	second := Share(reg, Counter("x_total", "X.", "kind"), &err)
	if err != nil {
		t.Fatal(err)
	}
	if first != second {
		t.Fatal("the second declaration did not get the first's collector")
	}
	second.WithLabelValues("k").Inc()
	if got := testutil.ToFloat64(first.WithLabelValues("k")); got != 1 {
		t.Errorf("first counts %v, want 1", got)
	}
}

func TestShareKeepsTheFirstError(t *testing.T) {
	reg := prometheus.NewRegistry()
	var err error
	Share(reg, Counter("x_total", "X.", "kind"), &err)
	// Same name, other labels: not the same collector, a real error.
	c := Share(reg, Counter("x_total", "X.", "other"), &err)
	if err == nil || c == nil {
		t.Fatalf("err %v, collector %v: want an error and the new collector", err, c)
	}
	firstErr := err
	Share(reg, Gauge("x_total", "X.", "more"), &err)
	if err != firstErr {
		t.Errorf("err became %v, want the first one kept", err)
	}
	var none error
	if got := Share(nil, Counter("x_total", "X."), &none); got == nil || none != nil {
		t.Errorf("nil registry: %v, %v", got, none)
	}
}
