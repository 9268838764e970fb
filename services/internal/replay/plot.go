package replay

import "io"

// Plot draws the idle-but-held GPUs of each run over time as an SVG (no dependencies).
func Plot(out io.Writer, rs []*Result) {}
