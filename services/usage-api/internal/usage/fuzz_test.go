package usage

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/gpuhub/gpuhub/services/internal/snapshot"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/collect"
)

// FuzzSnapshot decodes an agent's snapshot as the collector does and joins it into a view: whatever an agent
// sends (a bug, a skewed clock, a compromised node), the view stays one the API can encode and the ledger can
// charge: no negative or non-finite GPUs, nobody using more than they hold, utilization a percent.
func FuzzSnapshot(fz *testing.F) {
	good, err := json.Marshal(agents(now.Add(-time.Second), f(80))["gpu-a100-0"].Snapshot)
	if err != nil {
		fz.Fatal(err)
	}
	fz.Add(good)
	for _, s := range []string{
		`{"node":"gpu-a100-0","backend":"nvml","sampledAt":"2026-11-22T10:00:09Z","gpus":[],"pods":[{"uid":"ua","user":"alice",` +
			`"devices":[{"uuid":"MIG-1","resource":"nvidia.com/mig-3g.20gb"},{"uuid":"MIG-1","resource":"nvidia.com/mig-3g.20gb"}],"smUtilPercent":1e308}]}`,
		`{"node":"gpu-t4-0","sampledAt":"3000-01-01T00:00:00Z","pods":[{"uid":"ub","smUtilPercent":-5,"memoryUsedBytes":-1}]}`,
		`{"node":"","sampledAt":"0001-01-01T00:00:00Z","pods":[{"uid":"ua","devices":[{"uuid":"X","resource":"nvidia.com/gpu"}],"smUtilPercent":250}]}`,
		`{"gpus":[{"uuid":"GPU-A","migMode":true,"migDevices":[{"uuid":"MIG-1","profile":"7g.40gb","memoryTotalBytes":9223372036854775807}]}]}`,
		`{"node":"gpu-a100-0"} trailing`,
	} {
		fz.Add([]byte(s))
	}
	fz.Fuzz(func(t *testing.T, body []byte) {
		var s snapshot.Snapshot
		if err := json.NewDecoder(bytes.NewReader(body)).Decode(&s); err != nil {
			return
		}
		fetched := now.Add(-time.Second)
		ags := agents(fetched, f(80))
		ags["gpu-a100-0"] = collect.Result{FetchedAt: fetched, SampleSeenAt: fetched, Snapshot: &s}
		v := Build(Input{Now: now, Interval: 5 * time.Second, Pods: pods(), Nodes: nodes(), Agents: ags, Hub: hub()})
		if _, err := json.Marshal(v.Users); err != nil {
			t.Fatalf("users do not encode: %v", err)
		}
		if _, err := json.Marshal(v.Cluster); err != nil {
			t.Fatalf("cluster does not encode: %v", err)
		}
		for name, u := range v.Users {
			checkShare(t, name, u.Share.AllocatedGPUs, u.Share.UsedGPUs)
			for _, srv := range u.Servers {
				checkShare(t, name+"/"+srv.Pod, srv.AllocatedGPUs, srv.UsedGPUs)
				for _, g := range srv.GPUs {
					if p := g.SMUtilPercent; p != nil && (math.IsNaN(*p) || *p < 0 || *p > 100) {
						t.Errorf("%s: GPU %s at %v %% SM utilization", name, g.UUID, *p)
					}
				}
			}
		}
		for _, smp := range v.Samples {
			if bad(smp.Allocated) || bad(smp.Used) || smp.Used > smp.Allocated+1e-9 {
				t.Errorf("ledger sample %+v: used must lie in [0, allocated]", smp)
			}
		}
	})
}

func bad(x float64) bool { return math.IsNaN(x) || math.IsInf(x, 0) || x < 0 }

func checkShare(t *testing.T, who string, allocated float64, used *float64) {
	t.Helper()
	if bad(allocated) {
		t.Errorf("%s holds %v GPUs", who, allocated)
	}
	if used != nil && (bad(*used) || *used > allocated+1e-9) {
		t.Errorf("%s uses %v of %v GPUs", who, *used, allocated)
	}
}
