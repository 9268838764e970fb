package adminview

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/gpuhub/gpuhub/services/usage-api/internal/ledger"
)

// chart is an SVG line chart of GPU-hours per hour bucket, drawn on the server: held (allocated), used, and
// idle-but-held (held time nobody used). One hour bucket's GPU-hours are the GPUs held on average in that hour.
type chart struct {
	Width, Height                          int
	Left, Right, Top, Bottom               float64
	Held, Used, Idle                       string // polyline points
	IdleArea                               string // polygon points: idle-but-held down to the axis
	YTicks, XTicks                         []tick
	Buckets                                int
	TotalHeld, TotalUsed, TotalIdle, PeakY float64
	PeakAt                                 time.Time
	Summary                                string
}

type tick struct {
	Pos   float64 // rounded to a tenth of a pixel
	Label string
}

const (
	chartWidth  = 760
	chartHeight = 260
)

// newChart draws the window's buckets, from its first to the one To falls in; hours without GPU-hours are 0.
func newChart(w window, hs []ledger.HourTotals) *chart {
	first, last := w.From.UTC().Truncate(time.Hour), ceilHour(w.To.UTC()).Add(-time.Hour)
	n := int(last.Sub(first)/time.Hour) + 1
	if n < 1 {
		n = 1
	}
	held, used, idle := make([]float64, n), make([]float64, n), make([]float64, n)
	c := &chart{Width: chartWidth, Height: chartHeight, Left: 56, Right: chartWidth - 16, Top: 16, Bottom: chartHeight - 40, Buckets: n}
	for _, h := range hs {
		i := int(h.Bucket.Sub(first) / time.Hour)
		if i < 0 || i >= n {
			continue
		}
		held[i], used[i], idle[i] = h.Allocated, h.Used, h.Idle
		c.TotalHeld += h.Allocated
		c.TotalUsed += h.Used
		c.TotalIdle += h.Idle
	}
	top := 0.0
	for i := range n {
		if held[i] > top {
			top, c.PeakAt = held[i], first.Add(time.Duration(i)*time.Hour)
		}
		top = max(top, used[i])
	}
	c.PeakY = top
	step, ymax := niceScale(top)
	x := func(i int) float64 {
		if n == 1 {
			return (c.Left + c.Right) / 2
		}
		return c.Left + float64(i)*(c.Right-c.Left)/float64(n-1)
	}
	y := func(v float64) float64 { return c.Bottom - v/ymax*(c.Bottom-c.Top) }
	c.Held, c.Used, c.Idle = points(n, x, y, held), points(n, x, y, used), points(n, x, y, idle)
	c.IdleArea = fmt.Sprintf("%s %s,%s %s,%s", c.Idle, f1(x(n-1)), f1(c.Bottom), f1(x(0)), f1(c.Bottom))
	for v := 0.0; v <= ymax+step/2; v += step {
		c.YTicks = append(c.YTicks, tick{Pos: round1(y(v)), Label: strconv.FormatFloat(v, 'g', 4, 64)})
	}
	// About six labels along the time axis, on whole hours (whole days for long windows).
	every := max(1, n/6)
	if n > 48 {
		every = max(24, (n/6+23)/24*24)
	}
	for i := 0; i < n; i += every {
		t := first.Add(time.Duration(i) * time.Hour)
		label := t.Format("15:04")
		if n > 48 {
			label = t.Format("Jan 2")
		}
		c.XTicks = append(c.XTicks, tick{Pos: round1(x(i)), Label: label})
	}
	c.Summary = fmt.Sprintf("%d hours from %s: %.2f GPU-hours held, %.2f used, %.2f idle but held.", n, clock(first), c.TotalHeld, c.TotalUsed, c.TotalIdle)
	if top > 0 {
		c.Summary += fmt.Sprintf(" The most held in one hour: %.2f GPUs at %s.", top, clock(c.PeakAt))
	}
	return c
}

// niceScale returns a tick step of 1, 2 or 5 times a power of ten and the axis top, a multiple of it, with at most
// five steps above 0.
func niceScale(top float64) (step, ymax float64) {
	if top <= 0 {
		return 0.25, 1
	}
	raw := top / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if step = m * mag; step >= raw {
			break
		}
	}
	return step, math.Ceil(top/step-1e-9) * step
}

func points(n int, x func(int) float64, y func(float64) float64, vs []float64) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(f1(x(i)))
		b.WriteByte(',')
		b.WriteString(f1(y(vs[i])))
	}
	return b.String()
}

func f1(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

func round1(v float64) float64 { return math.Round(v*10) / 10 }
