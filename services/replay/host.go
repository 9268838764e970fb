package replay

import (
	"os"
	"strings"
)

// loadAverage is the machine's load average over 1, 5 and 15 minutes (Linux), for the report: the wall times
// depend on what else the machine runs. Empty where unknown.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}
