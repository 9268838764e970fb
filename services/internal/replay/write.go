package replay

import (
	"fmt"
	"io"
)

// WriteReport writes the report as markdown.
func WriteReport(out io.Writer, rep *Report) {
	Table(out, rep.Results)
	fmt.Fprintln(out)
	WriteVerdicts(out, Verdicts(rep.Results, rep.Seconds))
	fmt.Fprintf(out, "\nreplay %.1f s, total %.1f s\n", rep.Seconds, rep.Total)
}
