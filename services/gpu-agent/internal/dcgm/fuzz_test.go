package dcgm

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParse feeds dcgm-exporter text to the parser: it never panics, and every value it keeps is a percent of
// one GPU instance (a UUID, an instance ID of 0 or more, 0..100 and never NaN), whatever the exporter (or a proxy
// in front of it) wrote.
func FuzzParse(f *testing.F) {
	golden, err := os.ReadFile(filepath.Join("testdata", "dcgm-exporter-mig.txt"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(golden))
	for _, s := range []string{
		"# TYPE DCGM_FI_PROF_GR_ENGINE_ACTIVE gauge\nDCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu=\"0\",UUID=\"GPU-1\",GPU_I_ID=\"1\"} NaN\n",
		"DCGM_FI_PROF_GR_ENGINE_ACTIVE{UUID=\"GPU-1\",GPU_I_ID=\"-3\"} 0.5 1700000000000\n",
		"DCGM_FI_PROF_GR_ENGINE_ACTIVE{UUID=\"GPU-1\",GPU_I_ID=\"2\"} +Inf\n",
		"# TYPE DCGM_FI_PROF_GR_ENGINE_ACTIVE histogram\nDCGM_FI_PROF_GR_ENGINE_ACTIVE_bucket{le=\"1\"} 1\n",
		"# TYPE DCGM_FI_PROF_GR_ENGINE_ACTIVE counter\nDCGM_FI_PROF_GR_ENGINE_ACTIVE{UUID=\"GPU-1\",GPU_I_ID=\"7\"} 1e300\n",
		"{\"DCGM_FI_PROF_GR_ENGINE_ACTIVE\",UUID=\"GPU-1\",GPU_I_ID=\"0\"} 0.25\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		got, err := parse(strings.NewReader(text))
		if err != nil {
			if got != nil {
				t.Fatalf("error %v with samples %v", err, got)
			}
			return
		}
		for k, s := range got {
			if k.GPUUUID == "" || k.GPUInstanceID < 0 {
				t.Errorf("sample for %+v: not a GPU instance", k)
			}
			if math.IsNaN(s.pct) || s.pct < 0 || s.pct > 100 {
				t.Errorf("sample for %+v: %v is not a percent", k, s.pct)
			}
		}
	})
}
