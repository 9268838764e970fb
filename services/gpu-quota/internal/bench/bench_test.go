package bench

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/quota"
	"github.com/gpuhub/gpuhub/services/internal/benchkit"
	"github.com/gpuhub/gpuhub/services/internal/policy"
)

// TestNaiveCountsWhatItLists: the anchor decides like gpu-quota on what it LISTs, and has no reservations:
// with nothing running, every spawn within the limit is admitted, however many race.
func TestNaiveCountsWhatItLists(t *testing.T) {
	s := benchkit.Synth{Users: 8, Pods: 8, GPUNodes: 3, GPUPodEvery: 1}
	var objs []runtime.Object
	for _, n := range append(s.Nodes(), RaceNode()) {
		objs = append(objs, n)
	}
	for _, p := range s.PodObjects("jhub") {
		objs = append(objs, p)
	}
	var pol quota.Policy
	if err := policy.Decode("policy.yaml", []byte(PolicyYAML(2)), &pol); err != nil {
		t.Fatal(err)
	}
	naive := &Naive{Client: fake.NewClientset(objs...), Namespace: "jhub", Policy: &pol, Hours: SynthHours}
	ctx := context.Background()
	// user00000 (a researcher) holds an H100 (pod 0, profile h100): a second server is within 3 servers, 2 GPUs.
	d, free, err := naive.Admit(ctx, Request{User: benchkit.UserName(0), Groups: []string{benchkit.Group(0)}, Server: "two",
		Resources: map[string]int64{"nvidia.com/gpu": 1}, NodeSelector: benchkit.Profiles[0].NodeSelector})
	if err != nil || !d.Allow || !free {
		t.Errorf("researcher's second H100: allow=%v free=%v reason=%s err=%v", d.Allow, free, d.Reason, err)
	}
	// user00001 (a student) holds a MIG 1g.5gb slice: a second server is over maxServers 1.
	d, _, err = naive.Admit(ctx, Request{User: benchkit.UserName(1), Groups: []string{benchkit.Group(1)}, Server: "two",
		Resources: map[string]int64{"nvidia.com/mig-1g.5gb": 1}, NodeSelector: benchkit.Profiles[1].NodeSelector})
	if err != nil || d.Allow || d.Reason != quota.ReasonMaxServers {
		t.Errorf("student's second server: allow=%v reason=%s err=%v, want max_servers", d.Allow, d.Reason, err)
	}
	for i := range 5 {
		d, free, err := naive.Admit(ctx, Request{User: "racer", Groups: []string{"racers"}, Server: string(rune('a' + i)),
			Resources: map[string]int64{"nvidia.com/gpu": 1}, NodeSelector: RaceSelector})
		if err != nil || !d.Allow || !free {
			t.Fatalf("race spawn %d: allow=%v free=%v reason=%s err=%v (the naive enforcer has no reservations)", i, d.Allow, free, d.Reason, err)
		}
	}
}
