package report

import (
	"fmt"
	"image/color"
	"os"
	"sort"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/ratekeeper/ratekeeper/bench/harness"
)

// palette gives each client a colour people can tell apart (Okabe–Ito).
var palette = []color.Color{
	color.RGBA{0, 114, 178, 255},   // blue
	color.RGBA{0, 158, 115, 255},   // green
	color.RGBA{86, 180, 233, 255},  // sky
	color.RGBA{213, 94, 0, 255},    // vermillion
	color.RGBA{230, 159, 0, 255},   // orange
	color.RGBA{204, 121, 167, 255}, // purple
	color.RGBA{120, 120, 120, 255}, // grey
}

// Chart draws one panel per workload — requests accepted over time per
// client, and the dashed line of what the limits allow — and writes them
// as one PNG.
func Chart(path string, ws []harness.Workload, rs []harness.Result) error {
	var clients []string
	seen := map[string]bool{}
	for _, r := range rs {
		if !seen[r.Client] {
			seen[r.Client] = true
			clients = append(clients, r.Client)
		}
	}
	var plots [][]*plot.Plot
	for _, w := range ws {
		p, err := panel(w, rs, clients)
		if err != nil {
			return err
		}
		if p != nil {
			plots = append(plots, []*plot.Plot{p})
		}
	}
	if len(plots) == 0 {
		return fmt.Errorf("chart: no results to draw")
	}
	img := vgimg.NewWith(vgimg.UseWH(10*vg.Inch, vg.Length(len(plots))*4*vg.Inch), vgimg.UseDPI(110))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(plots), Cols: 1, PadX: vg.Millimeter, PadY: 6 * vg.Millimeter,
		PadTop: 2 * vg.Millimeter, PadBottom: 2 * vg.Millimeter, PadLeft: 2 * vg.Millimeter, PadRight: 4 * vg.Millimeter}
	canvases := plot.Align(plots, tiles, dc)
	for i := range plots {
		plots[i][0].Draw(canvases[i][0])
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func panel(w harness.Workload, rs []harness.Result, clients []string) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = w.Title
	p.Title.TextStyle.Font.Size = vg.Points(12)
	p.X.Label.Text = "seconds since the start of the first window"
	p.Y.Label.Text = "requests served"
	// The legend sits top left, in headroom above the lines (Y.Max below).
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.XOffs = 3 * vg.Millimeter
	p.Legend.YOffs = -2 * vg.Millimeter
	p.Legend.TextStyle.Font.Size = vg.Points(9)
	p.Add(plotter.NewGrid())
	end := 0.0
	any := false
	for ci, name := range clients {
		for _, r := range rs {
			if r.Workload != w.Name || r.Client != name {
				continue
			}
			any = true
			off := r.Offset.Seconds()
			last := off + r.Makespan.Seconds()
			end = max(end, last)
			line, err := plotter.NewLine(steps(r.Accepts, off, last))
			if err != nil {
				return nil, err
			}
			line.LineStyle.Color = palette[ci%len(palette)]
			line.LineStyle.Width = vg.Points(1.6)
			if ci >= 3 {
				line.LineStyle.Dashes = []vg.Length{vg.Points(5), vg.Points(2)}
			}
			p.Add(line)
			label := name
			if r.Violations() > 0 {
				label = fmt.Sprintf("%s (%d refused)", name, r.Violations())
			}
			if r.Unfinished > 0 {
				label += ", stopped"
			}
			p.Legend.Add(label, line)
		}
	}
	if !any {
		return nil, nil
	}
	var ref plotter.XYs
	const stepsPerSecond = 20
	for i := 0; float64(i) <= end*stepsPerSecond+1; i++ {
		t := float64(i) / stepsPerSecond
		ref = append(ref, plotter.XY{X: t, Y: w.Capacity(time.Duration(t*float64(time.Second)), 0)})
	}
	limit, err := plotter.NewLine(ref)
	if err != nil {
		return nil, err
	}
	limit.LineStyle.Color = color.Black
	limit.LineStyle.Width = vg.Points(1)
	limit.LineStyle.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
	p.Add(limit)
	what := "what the quota allows"
	if w.Bound == harness.BoundConcurrency {
		what = "what 100 in flight allow"
	}
	p.Legend.Add(what, limit)
	p.X.Min, p.X.Max = 0, end*1.02
	p.Y.Min, p.Y.Max = 0, float64(len(w.Paths))*1.5
	return p, nil
}

// steps is the cumulative count of accepts as a step line, shifted by
// off, from 0 to last.
func steps(accepts []float64, off, last float64) plotter.XYs {
	a := append([]float64(nil), accepts...)
	sort.Float64s(a)
	xy := plotter.XYs{{X: 0, Y: 0}}
	for i, t := range a {
		xy = append(xy, plotter.XY{X: t + off, Y: float64(i)}, plotter.XY{X: t + off, Y: float64(i + 1)})
	}
	xy = append(xy, plotter.XY{X: max(last, xy[len(xy)-1].X), Y: float64(len(a))})
	return xy
}
