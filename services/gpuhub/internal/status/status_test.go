package status

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuhub/gpuhub/services/gpuhub/internal/policycmd"
	"github.com/gpuhub/gpuhub/services/internal/contract"
	"github.com/gpuhub/gpuhub/services/internal/golden"
)

func TestInventoryRows(t *testing.T) {
	tests := map[string]struct {
		classes   []contract.ClassStats
		wantRows  []inventoryRow
		wantTotal inventoryRow
	}{
		"nothing": {
			wantRows:  []inventoryRow{},
			wantTotal: inventoryRow{Class: "TOTAL"},
		},
		"whole GPUs, one busy, one idle": {
			classes:   []contract.ClassStats{{Class: "gpu H100-80GB-HBM3", CapacityUnits: 2, AllocatedUnits: 2, CapacityGPUs: 2, AllocatedGPUs: 2, UsedGPUs: 0.75}},
			wantRows:  []inventoryRow{{Class: "gpu H100-80GB-HBM3", TotalUnits: 2, HeldUnits: 2, Total: 2, Held: 2, Busy: 0.75, IdleHeld: 1.25}},
			wantTotal: inventoryRow{Class: "TOTAL", TotalUnits: 2, HeldUnits: 2, Total: 2, Held: 2, Busy: 0.75, IdleHeld: 1.25},
		},
		"MIG without DCGM: unknown is not idle": {
			classes: []contract.ClassStats{{Class: "mig A100-SXM4-40GB 3g.20gb", CapacityUnits: 2, AllocatedUnits: 1, CapacityGPUs: 6.0 / 7,
				AllocatedGPUs: 3.0 / 7, UsedUnknownGPUs: 3.0 / 7}},
			wantRows: []inventoryRow{{Class: "mig A100-SXM4-40GB 3g.20gb", TotalUnits: 2, HeldUnits: 1, FreeUnits: 1, Total: 6.0 / 7,
				Held: 3.0 / 7, Unknown: 3.0 / 7, Free: 3.0 / 7}},
			wantTotal: inventoryRow{Class: "TOTAL", TotalUnits: 2, HeldUnits: 1, FreeUnits: 1, Total: 6.0 / 7, Held: 3.0 / 7,
				Unknown: 3.0 / 7, Free: 3.0 / 7},
		},
		"a time-sliced share busier than its share is not negatively idle": {
			classes: []contract.ClassStats{
				{Class: "shared T4", CapacityUnits: 4, AllocatedUnits: 1, CapacityGPUs: 1, AllocatedGPUs: 0.25, UsedGPUs: 1},
				{Class: "gpu H100-80GB-HBM3", CapacityUnits: 2, CapacityGPUs: 2},
			},
			wantRows: []inventoryRow{
				{Class: "shared T4", TotalUnits: 4, HeldUnits: 1, FreeUnits: 3, Total: 1, Held: 0.25, Busy: 1, Free: 0.75},
				{Class: "gpu H100-80GB-HBM3", TotalUnits: 2, FreeUnits: 2, Total: 2, Free: 2},
			},
			wantTotal: inventoryRow{Class: "TOTAL", TotalUnits: 6, HeldUnits: 1, FreeUnits: 5, Total: 3, Held: 0.25, Busy: 1, Free: 2.75},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			rows, total := inventoryRows(tc.classes)
			if diff := cmp.Diff(tc.wantRows, rows); diff != "" {
				t.Errorf("rows (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantTotal, total); diff != "" {
				t.Errorf("total (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBytesText(t *testing.T) {
	tests := map[string]struct {
		bytes uint64
		want  string
	}{
		"none":       {0, "0 B"},
		"bytes":      {1023, "1023 B"},
		"MiB":        {512 << 20, "512.0 MiB"},
		"GiB":        {3 << 29, "1.5 GiB"},
		"a whole H1": {80 << 30, "80.0 GiB"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, bytesText(tc.bytes)); diff != "" {
				t.Errorf("bytesText(%d) (-want +got):\n%s", tc.bytes, diff)
			}
		})
	}
}

// The usage API's and gpu-quota's answers on the local cluster's topology (e2e/topology.yaml): carol holds
// both H100s, one idle; alice a MIG slice without DCGM; bob a T4 share on a node whose agent is stale; dave
// waits for an H100.
const (
	clusterAnswer = `{"sampledAt":"2026-11-27T15:00:05Z","intervalSeconds":5,"simulated":true,"gpuNodes":3,"agents":3,
	 "staleAgents":1,"capacityGPUs":4.857,"allocatedGPUs":2.679,"usedGPUs":0.95,"usedUnknownGPUs":0.679,"users":3,
	 "classes":[
	  {"class":"gpu H100-80GB-HBM3","kind":"gpu","product":"NVIDIA H100 80GB HBM3","capacityUnits":2,"allocatedUnits":2,
	   "capacityGPUs":2,"allocatedGPUs":2,"usedGPUs":0.95,"usedUnknownGPUs":0,"smUtilPercent":47.5,"memoryUsedBytes":0,"memoryTotalBytes":0},
	  {"class":"mig A100-SXM4-40GB 1g.5gb","kind":"mig","product":"NVIDIA A100-SXM4-40GB","profile":"1g.5gb","capacityUnits":6,
	   "allocatedUnits":0,"capacityGPUs":0.857142857142857,"allocatedGPUs":0,"usedGPUs":0,"usedUnknownGPUs":0,"smUtilPercent":null,
	   "memoryUsedBytes":0,"memoryTotalBytes":0},
	  {"class":"mig A100-SXM4-40GB 3g.20gb","kind":"mig","product":"NVIDIA A100-SXM4-40GB","profile":"3g.20gb","capacityUnits":2,
	   "allocatedUnits":1,"capacityGPUs":0.857142857142857,"allocatedGPUs":0.428571428571429,"usedGPUs":0,
	   "usedUnknownGPUs":0.428571428571429,"smUtilPercent":null,"memoryUsedBytes":0,"memoryTotalBytes":0},
	  {"class":"shared T4","kind":"shared","product":"Tesla T4","capacityUnits":4,"allocatedUnits":1,"capacityGPUs":1,
	   "allocatedGPUs":0.25,"usedGPUs":0,"usedUnknownGPUs":0.25,"smUtilPercent":null,"memoryUsedBytes":0,"memoryTotalBytes":0}],
	 "agentStatus":[
	  {"node":"gpu-a100-0","sampledAt":"2026-11-27T15:00:04Z","ageSeconds":1,"stale":false},
	  {"node":"gpu-h100-0","sampledAt":"2026-11-27T15:00:04Z","ageSeconds":1,"stale":false},
	  {"node":"gpu-t4-0","sampledAt":"2026-11-27T14:50:00Z","ageSeconds":605,"stale":true,
	   "staleReason":"the GPU agent on node gpu-t4-0 has not sampled since 14:50:00 UTC (10 min)"}]}`
	serversAnswer = `{"sampledAt":"2026-11-27T15:00:05Z","servers":[
	 {"user":"alice","server":"","pod":"jupyter-alice","namespace":"hub","node":"gpu-a100-0","kind":"mig",
	  "class":"mig A100-SXM4-40GB 3g.20gb","allocatedGPUs":0.428571428571429,"smUtilPercent":null,
	  "utilizationUnknownReason":"MIG utilization needs DCGM on node gpu-a100-0","memoryUsedBytes":1610612736,
	  "stale":false,"staleReason":"","simulated":true},
	 {"user":"bob","server":"t4","pod":"jupyter-bob--t4","namespace":"hub","node":"gpu-t4-0","kind":"shared",
	  "class":"shared T4","allocatedGPUs":0.25,"smUtilPercent":null,"utilizationUnknownReason":"stale telemetry",
	  "memoryUsedBytes":0,"stale":true,"staleReason":"the GPU agent on node gpu-t4-0 has not sampled since 14:50:00 UTC (10 min)",
	  "simulated":true},
	 {"user":"carol","server":"","pod":"jupyter-carol","namespace":"hub","node":"gpu-h100-0","kind":"gpu",
	  "class":"gpu H100-80GB-HBM3","allocatedGPUs":1,"smUtilPercent":95,"utilizationUnknownReason":"",
	  "memoryUsedBytes":42949672960,"stale":false,"staleReason":"","simulated":true},
	 {"user":"carol","server":"idle","pod":"jupyter-carol--idle","namespace":"hub","node":"gpu-h100-0","kind":"gpu",
	  "class":"gpu H100-80GB-HBM3","allocatedGPUs":1,"smUtilPercent":0,"utilizationUnknownReason":"",
	  "memoryUsedBytes":0,"stale":false,"staleReason":"","simulated":true}]}`
	waitlistAnswer = `{"places":[
	 {"user":"dave","server":"","class":"gpu H100-80GB-HBM3","description":"H100","state":"waiting","position":1,"waiting":1,
	  "joinedAt":"2026-11-27T14:40:00Z","estimate":"2026-11-27T15:30:00Z","autoStart":true,"fairShare":0.8}]}`
)

// fakeServices is the usage API under /services/gpu-usage/ and gpu-quota under /services/gpu-quota/, as they
// answer an admin's token, a user's token (the inventory only) and an unknown one.
func fakeServices(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		token := strings.TrimPrefix(r.Header.Get("Authorization"), "token ")
		if token != "admin-token" && token != "user-token" {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"status":401,"message":"invalid token"}`))
			return
		}
		admin := token == "admin-token"
		switch r.URL.Path {
		case "/services/gpu-usage/api/v1/cluster":
			_, _ = w.Write([]byte(clusterAnswer))
		case "/services/gpu-usage/api/v1/servers":
			if !admin {
				w.WriteHeader(http.StatusForbidden)
				_, _ = w.Write([]byte(`{"status":403,"message":"only Hub admins and the reader services may list servers"}`))
				return
			}
			_, _ = w.Write([]byte(serversAnswer))
		case "/services/gpu-quota/api/v1/waitlist":
			if !admin {
				w.WriteHeader(http.StatusForbidden)
				return
			}
			_, _ = w.Write([]byte(waitlistAnswer))
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestRun(t *testing.T) {
	location = time.UTC
	now := time.Date(2026, 11, 27, 15, 0, 10, 0, time.UTC)
	srv := fakeServices(t)
	down := httptest.NewServer(http.NotFoundHandler())
	downURL := down.URL
	down.Close()
	usage, quota := srv.URL+"/services/gpu-usage/", srv.URL+"/services/gpu-quota"
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("admin-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	tests := map[string]struct {
		env        map[string]string
		args       []string
		wantCode   int
		wantGolden string // stdout
		wantStderr string // contained in stderr
	}{
		"everything, an admin's token": {
			env:      map[string]string{"JUPYTERHUB_API_TOKEN": "admin-token"},
			args:     []string{"--usage-url", usage, "--quota-url", quota},
			wantCode: 0, wantGolden: "admin.golden",
		},
		"URLs from the environment, the token from a file": {
			env:      map[string]string{"GPUHUB_USAGE_URL": usage, "GPUHUB_QUOTA_URL": quota},
			args:     []string{"--token-file", tokenFile},
			wantCode: 0, wantGolden: "admin.golden",
		},
		"a user's token: the inventory, and what to do for the rest": {
			env:      map[string]string{"JUPYTERHUB_API_TOKEN": "user-token"},
			args:     []string{"--usage-url", usage, "--quota-url", quota},
			wantCode: 1, wantGolden: "user-token.golden",
		},
		"gpu-quota not given": {
			env:      map[string]string{"JUPYTERHUB_API_TOKEN": "admin-token"},
			args:     []string{"--usage-url", usage},
			wantCode: 0, wantGolden: "no-quota.golden",
		},
		"the usage API down, the waitlist still shown": {
			env:      map[string]string{"JUPYTERHUB_API_TOKEN": "admin-token"},
			args:     []string{"--usage-url", downURL + "/services/gpu-usage/", "--quota-url", quota},
			wantCode: 1, wantGolden: "usage-down.golden",
		},
		"a URL without the service prefix": {
			env:      map[string]string{"JUPYTERHUB_API_TOKEN": "admin-token"},
			args:     []string{"--usage-url", srv.URL},
			wantCode: 1, wantGolden: "wrong-url.golden",
		},
		"an unknown token": {
			env:      map[string]string{"JUPYTERHUB_API_TOKEN": "old-token"},
			args:     []string{"--usage-url", usage},
			wantCode: 1, wantGolden: "unknown-token.golden",
		},
		"no token": {
			args:     []string{"--usage-url", usage},
			wantCode: 1, wantStderr: "no Hub token: set JUPYTERHUB_API_TOKEN",
		},
		"no URL": {
			env:      map[string]string{"JUPYTERHUB_API_TOKEN": "admin-token"},
			wantCode: 2, wantStderr: "give --usage-url URL (or set GPUHUB_USAGE_URL)",
		},
		"an argument": {
			env:      map[string]string{"JUPYTERHUB_API_TOKEN": "admin-token"},
			args:     []string{"--usage-url", usage, "alice"},
			wantCode: 2, wantStderr: `unexpected "alice"`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			env := policycmd.Env{Stdout: &out, Stderr: &errOut, Getenv: func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }}
			code := Run(context.Background(), tc.args, env, func() time.Time { return now })
			if code != tc.wantCode {
				t.Errorf("exit code %d, want %d; stderr:\n%s", code, tc.wantCode, errOut.String())
			}
			if !strings.Contains(errOut.String(), tc.wantStderr) {
				t.Errorf("stderr %q, want it to contain %q", errOut.String(), tc.wantStderr)
			}
			if strings.Contains(out.String()+errOut.String(), "admin-token") {
				t.Errorf("the token was printed:\n%s%s", out.String(), errOut.String())
			}
			got := strings.NewReplacer(strings.TrimPrefix(srv.URL, "http://"), "hub.test",
				strings.TrimPrefix(downURL, "http://"), "down.test").Replace(out.String())
			if tc.wantGolden == "" {
				if got != "" {
					t.Errorf("stdout %q, want nothing", got)
				}
				return
			}
			golden.Check(t, tc.wantGolden, got)
		})
	}
}
