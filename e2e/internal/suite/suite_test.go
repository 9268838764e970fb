package suite

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestBegin(t *testing.T) {
	tests := map[string]struct {
		unset      string // a variable left empty
		target     string
		wantErrHas []string
	}{
		"all set":                      {},
		"a required variable is empty": {unset: "GPUHUB_CHART", wantErrHas: []string{"quota e2e: GPUHUB_CHART is not set", "`make e2e`"}},
		"the suite's own is empty":     {unset: QuotaBin, target: "`make chaos`", wantErrHas: []string{QuotaBin, "`make chaos`"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			for _, k := range append(slices.Clone(Required), QuotaBin) {
				t.Setenv(k, "/x/"+k)
			}
			if tc.unset != "" {
				t.Setenv(tc.unset, "")
			}
			s, err := Begin("quota e2e", tc.target, QuotaBin)
			if len(tc.wantErrHas) > 0 {
				for _, want := range tc.wantErrHas {
					if err == nil || !strings.Contains(err.Error(), want) {
						t.Errorf("Begin() error = %v, want one containing %q", err, want)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if !strings.Contains(s.Dir, "gpuhub-quota-e2e-") {
				t.Errorf("dir %s, want a gpuhub-quota-e2e- temp dir", s.Dir)
			}
			if got := s.Env[QuotaBin]; got != "/x/"+QuotaBin {
				t.Errorf("Env[%s] = %q", QuotaBin, got)
			}
		})
	}
}

// TestGpuhub: the services a suite runs are those whose binary it needs, each with a port and a token of its own.
func TestGpuhub(t *testing.T) {
	tests := map[string]struct {
		env          map[string]string
		wantServices []string
	}{
		"usage API only": {env: map[string]string{}, wantServices: []string{"gpu-usage"}},
		"quota":          {env: map[string]string{QuotaBin: "q"}, wantServices: []string{"gpu-quota", "gpu-usage"}},
		"every service": {
			env:          map[string]string{QuotaBin: "q", ProfilesBin: "p", CullerBin: "c"},
			wantServices: []string{"gpu-culler", "gpu-profiles", "gpu-quota", "gpu-usage"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := &Suite{Name: "test", Env: tc.env}
			services := s.Gpuhub().LocalServices()
			if diff := cmp.Diff(tc.wantServices, slices.Sorted(maps.Keys(services))); diff != "" {
				t.Errorf("services (-want +got):\n%s", diff)
			}
			ports, tokens := map[int]bool{}, map[string]bool{}
			for name, svc := range services {
				if svc.Port == 0 || svc.Token == "" || ports[svc.Port] || tokens[svc.Token] {
					t.Errorf("%s: port %d, token set %v: want a port and a token of its own", name, svc.Port, svc.Token != "")
				}
				ports[svc.Port], tokens[svc.Token] = true, true
			}
		})
	}
}
