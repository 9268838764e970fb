package replay

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// plotColors are the runs' line colours, in Modes order (colour-blind safe: Okabe-Ito).
var plotColors = []string{"#E69F00", "#56B4E9", "#009E73", "#CC79A7", "#D55E00", "#0072B2", "#000000"}

// plotDash tells the gpuhub setups with a part off from the full ones (dashed lines).
func plotDash(m Mode) string {
	if m == GPUHubNoCulling || m == GPUHubNoAdmission || m == GPUHubNoWaitlist {
		return ` stroke-dasharray="6 3"`
	}
	return ""
}

// Plot draws the idle-but-held GPUs of each run over time (hourly means, smoothed over a day so the lines can
// be told apart) as an SVG with no dependencies.
func Plot(out io.Writer, rs []*Result) {
	const w, h, left, right, top, bottom, perRow = 900.0, 400.0, 60.0, 20.0, 40.0, 90.0, 3
	n := 0
	peak := 1.0
	series := make([][]float64, len(rs))
	for i, r := range rs {
		series[i] = smooth(r.IdleSeries(), 24)
		n = max(n, len(series[i]))
		for _, v := range series[i] {
			peak = max(peak, v)
		}
	}
	peak = math.Ceil(peak/5) * 5
	x := func(i int) float64 { return left + (w-left-right)*float64(i)/float64(max(n-1, 1)) }
	y := func(v float64) float64 { return top + (h-top-bottom)*(1-v/peak) }
	fmt.Fprintf(out, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="12">`+"\n", w, h, w, h)
	fmt.Fprintf(out, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	var cl Layout
	if len(rs) > 0 {
		cl = rs[0].Cluster
	}
	fmt.Fprintf(out, `<text x="%.0f" y="22" font-size="14">Allocated-but-idle GPUs, every setup on the same %d GPUs (%d time-sliced); 24 h moving average</text>`+"\n",
		left, cl.GPUs, cl.SharedGPUs)
	for k := 0; k <= 5; k++ {
		v := peak * float64(k) / 5
		fmt.Fprintf(out, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#ddd"/><text x="%.1f" y="%.1f" text-anchor="end">%.0f</text>`+"\n",
			left, w-right, y(v), y(v), left-6, y(v)+4, v)
	}
	for d := 0; d*24 < n; d += 7 {
		fmt.Fprintf(out, `<text x="%.1f" y="%.1f" text-anchor="middle">day %d</text>`+"\n", x(d*24), h-bottom+16, d)
	}
	fmt.Fprintf(out, `<text x="14" y="%.1f" transform="rotate(-90 14 %.1f)" text-anchor="middle">GPUs held while idle</text>`+"\n", (top+h-bottom)/2, (top+h-bottom)/2)
	for i, s := range series {
		var pts []string
		for j, v := range s {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(j), y(v)))
		}
		color, dash := plotColors[i%len(plotColors)], plotDash(rs[i].Mode)
		fmt.Fprintf(out, `<polyline fill="none" stroke="%s" stroke-width="1.6"%s points="%s"/>`+"\n", color, dash, strings.Join(pts, " "))
		lx, ly := left+float64(i%perRow)*270, h-42+float64(i/perRow)*20
		fmt.Fprintf(out, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="%s" stroke-width="3"%s/><text x="%.1f" y="%.1f">%s</text>`+"\n",
			lx, lx+24, ly, ly, color, dash, lx+30, ly+4, rs[i].Name())
	}
	fmt.Fprintln(out, "</svg>")
}

// smooth is the moving average of xs over width points (centred).
func smooth(xs []float64, width int) []float64 {
	out := make([]float64, len(xs))
	for i := range xs {
		lo, hi := max(0, i-width/2), min(len(xs), i+width/2+1)
		sum := 0.0
		for _, v := range xs[lo:hi] {
			sum += v
		}
		out[i] = sum / float64(hi-lo)
	}
	return out
}
