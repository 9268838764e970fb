package bench

import (
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpuhub/gpuhub/services/usage-api/internal/usage"
)

// The usage.Builder over B1's synthetic cluster (Synthesize): its steady tick's garbage and what a view keeps.

// BenchmarkBuildSteadyTick is one steady-state tick of B1's cluster (20,000 users and pods, 2,000 GPUs, the
// SUT's 10 replicas per T4): the bytes and objects Build allocates at each tick for the collector to clear under
// the API's requests. objects/view is what one published view holds on the heap: the collector marks it at every
// cycle while it is the latest.
func BenchmarkBuildSteadyTick(b *testing.B) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	in := Synthesize(20000, 2000, 20000, 10, now).Input(now, 5*time.Second)
	var builder usage.Builder
	builder.Build(in) // warm: the builder's memory, and the class and description names (once per process)
	// Before the loop, which keeps its last view alive.
	objects := heldObjects(func() any { return builder.Build(in) })
	b.ReportAllocs()
	for b.Loop() {
		builder.Build(in)
	}
	b.ReportMetric(float64(objects), "objects/view")
}

// heldObjects is how many heap objects what build returns keeps alive.
func heldObjects(build func() any) int64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	kept := build()
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(kept)
	return int64(after.HeapObjects) - int64(before.HeapObjects)
}

// TestSteadyBuildAllocates: a builder's steady tick allocates per node and per class, not per pod: the view's
// users, servers, units and numbers come in a few slabs (it was about 11 objects per pod).
func TestSteadyBuildAllocates(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	in := Synthesize(2000, 200, 2000, 10, now).Input(now, 5*time.Second)
	var b usage.Builder
	b.Build(in)
	allocs := testing.AllocsPerRun(5, func() { b.Build(in) })
	if limit := float64(len(in.Pods)) / 10; allocs > limit {
		t.Errorf("a steady tick of %d pods on %d nodes: %.0f allocations, want at most %.0f", len(in.Pods), len(in.Nodes), allocs, limit)
	}
}

// TestBuilderKeepsNoViewMemory: over B1-shaped clusters (usage's test of the same name has the hand-made ones), a
// Builder that built other views before builds the view a fresh one builds, and leaves the views it built before
// as they were.
func TestBuilderKeepsNoViewMemory(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	twoServers := Synthesize(40, 16, 60, 4, now).Input(now, 5*time.Second) // 20 users with two servers
	noHubUser := Synthesize(10, 8, 10, 4, now).Input(now, 5*time.Second)
	noHubUser.Pods = slices.Clone(noHubUser.Pods)
	for i := range noHubUser.Pods {
		if i%3 == 0 {
			noHubUser.Pods[i].User = ""
		}
	}
	inputs := []struct {
		name string
		in   usage.Input
	}{
		{"two servers each", twoServers},
		{"pods of no Hub user", noHubUser},
		{"two servers each again", twoServers},
	}
	// Sums over maps (the classes) are in map order: the last bits may differ from one build to the next.
	approx := cmpopts.EquateApprox(0, 1e-12)
	var b usage.Builder
	built := make([]*usage.View, len(inputs))
	for i, tc := range inputs {
		built[i] = b.Build(tc.in)
		if diff := cmp.Diff(usage.Build(tc.in), built[i], approx); diff != "" {
			t.Errorf("%s: a used builder's view (-fresh +used):\n%s", tc.name, diff)
		}
	}
	for i, tc := range inputs {
		if diff := cmp.Diff(usage.Build(tc.in), built[i], approx); diff != "" {
			t.Errorf("%s: the view changed after later builds (-built then +now):\n%s", tc.name, diff)
		}
	}
}
