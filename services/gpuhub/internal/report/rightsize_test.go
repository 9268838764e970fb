package report

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gpuhub/gpuhub/services/internal/contract"
	"github.com/gpuhub/gpuhub/services/internal/golden"
)

// fakeRightSize answers api/v1/right-size (admin-token) and api/v1/users/{name}/right-size (admin-token, and
// bob-token for bob) as the usage API does (services/usage-api/openapi.yaml).
func fakeRightSize(t *testing.T) *httptest.Server {
	from := time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)
	bob := contract.RightSizeResponse{User: "bob", Period: "7d", From: from, AsOf: asOf, Servers: []contract.RightSize{
		{User: "bob", Verdict: contract.VerdictSmaller, Caveats: []string{"measured on simulated GPUs: the numbers are not a real workload's"}, Simulated: true,
			Reason: "MIG 1g.10gb on an H100, 1/7 of a GPU would do (peak memory 4.0 GiB (4.8 GiB with the 20 % margin), p95 SM utilization 10 % (0.1 GPU) over 6.0 h busy): it saves 0.857 GPU-hours per hour held.",
			Held:   contract.RightSizeKind{Kind: "gpu", Class: "gpu H100-80GB-HBM3", Description: "Whole H100-80GB-HBM3", MemoryBytes: 81559 << 20, ComputeGPUs: 1, CostPerHour: 1},
			Candidates: []contract.RightSizeCandidate{{RightSizeKind: contract.RightSizeKind{Kind: "mig", Class: "mig H100-80GB-HBM3 1g.10gb",
				Description: "MIG 1g.10gb on an H100, 1/7 of a GPU", MemoryBytes: 9984 << 20, ComputeGPUs: 1.0 / 7, CostPerHour: 1.0 / 7}, SavedPerHour: 6.0 / 7}},
			Evidence: contract.RightSizeEvidence{From: from, To: asOf, BusySeconds: 6 * 3600, HeldSeconds: 40 * 3600, Samples: 4320,
				PeakMemoryBytes: 4 << 30, P95MemoryBytes: 2 << 30, P95SMUtilPercent: 10, P95UsedGPUs: 0.1, NeedMemoryBytes: 5153960756,
				MemoryMarginRatio: 0.2, MinBusySeconds: 3600, MinSamples: 100}},
		{User: "bob", Server: "big", Verdict: contract.VerdictNotEnoughData, Caveats: []string{},
			Reason: "The GPU was busy for 20 min of the 2.0 h it was held; advice needs at least 1.0 h busy.",
			Held:   contract.RightSizeKind{Kind: "shared", Class: "shared T4", Description: "1 of 4 time-sliced shares of a T4", MemoryBytes: 3840 << 20, ComputeGPUs: 0.25, CostPerHour: 0.25},
			Evidence: contract.RightSizeEvidence{From: from, To: asOf, BusySeconds: 1200, HeldSeconds: 7200, Samples: 240,
				PeakMemoryBytes: 1 << 30, P95SMUtilPercent: 40, MemoryMarginRatio: 0.2, MinBusySeconds: 3600, MinSamples: 100}},
	}}
	savings := map[string]contract.RightSizeSavings{
		"user": {Period: "7d", From: from, AsOf: asOf, By: "user", SaveableGPUHours: 240.0 / 7, HeldGPUHours: 40.5, Rows: []contract.RightSizeSavingsRow{
			{Key: "bob", SaveableGPUHours: 240.0 / 7, HeldGPUHours: 40.5, Servers: 2, Smaller: 1},
			{Key: "alice", SaveableGPUHours: 0, HeldGPUHours: 0, Servers: 1, Smaller: 0}}},
		"group": {Period: "7d", From: from, AsOf: asOf, By: "group", SaveableGPUHours: 240.0 / 7, HeldGPUHours: 40.5, Rows: []contract.RightSizeSavingsRow{
			{Key: "students", SaveableGPUHours: 240.0 / 7, HeldGPUHours: 40.5, Servers: 3, Smaller: 1},
			{Key: "(no group)", SaveableGPUHours: 0, HeldGPUHours: 0, Servers: 0, Smaller: 0}}},
		"kind": {Period: "7d", From: from, AsOf: asOf, By: "kind", SaveableGPUHours: 240.0 / 7, HeldGPUHours: 40.5, Rows: []contract.RightSizeSavingsRow{
			{Key: "gpu", SaveableGPUHours: 240.0 / 7, HeldGPUHours: 40, Servers: 1, Smaller: 1},
			{Key: "shared", SaveableGPUHours: 0, HeldGPUHours: 0.5, Servers: 2, Smaller: 0}}},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fail := func(status int, msg string) {
			w.WriteHeader(status)
			_ = json.NewEncoder(w).Encode(contract.Error{Status: status, Message: msg})
		}
		token := r.Header.Get("Authorization")
		if r.URL.Query().Get("period") != "7d" {
			fail(http.StatusBadRequest, "the test asks for 7d")
			return
		}
		switch r.URL.Path {
		case "/services/gpu-usage/api/v1/right-size":
			if token != "token admin-token" {
				fail(http.StatusForbidden, "every user's right-size savings are for admins")
				return
			}
			_ = json.NewEncoder(w).Encode(savings[r.URL.Query().Get("by")])
		case "/services/gpu-usage/api/v1/users/bob/right-size":
			if token != "token admin-token" && token != "token bob-token" {
				fail(http.StatusForbidden, "you may read only your own right-size advice")
				return
			}
			_ = json.NewEncoder(w).Encode(bob)
		default:
			if strings.HasSuffix(r.URL.Path, "/right-size") && token != "token admin-token" {
				fail(http.StatusForbidden, "you may read only your own right-size advice")
				return
			}
			fail(http.StatusNotFound, "no such endpoint")
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestRightSizeReport(t *testing.T) {
	srv := fakeRightSize(t)
	admin := map[string]string{"JUPYTERHUB_API_TOKEN": "admin-token", "GPUHUB_USAGE_URL": srv.URL + "/services/gpu-usage/"}
	bob := map[string]string{"JUPYTERHUB_API_TOKEN": "bob-token", "GPUHUB_USAGE_URL": srv.URL + "/services/gpu-usage/"}
	for name, tc := range map[string]struct {
		env        map[string]string
		args       []string
		wantGolden string
	}{
		"by user":          {admin, []string{"--right-size", "--window", "7d"}, "rightsize-user.table"},
		"by group":         {admin, []string{"--right-size", "--window", "7d", "--by", "group"}, "rightsize-group.table"},
		"by kind csv":      {admin, []string{"--right-size", "--window", "7d", "--by", "kind", "--format", "csv"}, "rightsize-kind.csv"},
		"by kind json":     {admin, []string{"--right-size", "--window", "7d", "--by", "kind", "--format", "json"}, "rightsize-kind.json"},
		"bob's own advice": {bob, []string{"--right-size", "--window", "7d", "--user", "bob"}, "rightsize-bob.table"},
		"bob's advice csv": {admin, []string{"--right-size", "--window", "7d", "--user", "bob", "--format", "csv"}, "rightsize-bob.csv"},
		// Without --window, the usage API's default period (7d), as the help says.
		"default window": {admin, []string{"--right-size", "--by", "kind", "--format", "csv"}, "rightsize-kind.csv"},
	} {
		t.Run(name, func(t *testing.T) {
			code, out, errOut := run(t, tc.env, 0, tc.args...)
			if code != 0 || errOut != "" {
				t.Fatalf("exit %d, stderr:\n%s", code, errOut)
			}
			golden.Check(t, tc.wantGolden, out)
		})
	}
}

func TestRightSizeReportErrors(t *testing.T) {
	srv := fakeRightSize(t)
	env := map[string]string{"JUPYTERHUB_API_TOKEN": "bob-token", "GPUHUB_USAGE_URL": srv.URL + "/services/gpu-usage/"}
	for name, tc := range map[string]struct {
		args     []string
		wantCode int
		wantErr  string
	}{
		"a window the profiles do not keep": {[]string{"--right-size", "--window", "90d"}, 2, `--right-size --window "90d": write 24h, 7d or 30d`},
		"a group":                           {[]string{"--right-size", "--window", "7d", "--group", "students"}, 2, "--right-size has no --group"},
		"everyone's with a user's token":    {[]string{"--right-size", "--window", "7d"}, 1, "every user's right-size savings are for admins"},
		"another user's advice":             {[]string{"--right-size", "--window", "7d", "--user", "alice"}, 1, "you may read only your own right-size advice"},
	} {
		t.Run(name, func(t *testing.T) {
			code, _, errOut := run(t, env, 0, tc.args...)
			if code != tc.wantCode || !strings.Contains(errOut, tc.wantErr) {
				t.Errorf("exit %d, want %d; stderr %q, want it to say %q", code, tc.wantCode, errOut, tc.wantErr)
			}
		})
	}
}

// TestRightSizeCSVFormulas: names that a spreadsheet would take for a formula are quoted, as the usage API's CSV
// does.
func TestRightSizeCSVFormulas(t *testing.T) {
	var b strings.Builder
	if err := savingsCSV(&b, contract.RightSizeSavings{By: "user", Rows: []contract.RightSizeSavingsRow{{Key: "=HYPERLINK(\"http://x\")"}}}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "'=HYPERLINK") {
		t.Errorf("savings CSV:\n%s", b.String())
	}
	b.Reset()
	if err := adviceCSV(&b, contract.RightSizeResponse{Servers: []contract.RightSize{{Server: "@evil", Held: contract.RightSizeKind{Class: "gpu T4"},
		Verdict: contract.VerdictKeep, Caveats: []string{"-x"}}}}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "'@evil") || !strings.Contains(b.String(), "'-x") {
		t.Errorf("advice CSV:\n%s", b.String())
	}
}
