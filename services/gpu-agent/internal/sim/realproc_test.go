package sim

import (
	"context"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"github.com/gpuhub/gpuhub/services/gpu-agent/internal/cluster"
	"github.com/gpuhub/gpuhub/services/internal/gpu"
)

// TestRealProcBusyVersusIdle runs two real processes carrying the emulator's
// environment, one spinning and one sleeping, and reads the real /proc: the
// busy pod's GPU must show clearly more utilization than the idle one's.
func TestRealProcBusyVersusIdle(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("needs /proc")
	}
	start := func(uid, script string) {
		cmd := exec.CommandContext(t.Context(), "sh", "-c", script)
		cmd.Env = append(os.Environ(), EnvNode+"=test-node-realproc", EnvPodUID+"="+uid)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	}
	start("busy", "while :; do :; done")
	start("idle", "sleep 60")

	fc := &fakeCluster{
		node: node(nil, map[string]string{gpu.ResourceGPU: "2"}),
		pods: []cluster.Pod{gpuPod("busy", map[string]int64{gpu.ResourceGPU: 1}), gpuPod("idle", map[string]int64{gpu.ResourceGPU: 1})},
	}
	b := New(Options{Node: "test-node-realproc", Cluster: fc, Proc: os.DirFS("/proc")})
	if _, err := b.Sample(context.Background()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	r, err := b.Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	busy, idle := *r.GPUs[0].UtilizationPercent, *r.GPUs[1].UtilizationPercent
	t.Logf("busy %.0f %%, idle %.0f %%", busy, idle)
	// Lenient: the machine is shared, but a spinning shell gets far more than 10 %.
	if busy < 10 || idle > 5 {
		t.Errorf("busy GPU %.1f %%, idle GPU %.1f %%: want busy >= 10 and idle <= 5", busy, idle)
	}
}

// BenchmarkScanRealProc measures one scan of this machine's /proc, the
// simulated backend's main cost per sample.
func BenchmarkScanRealProc(b *testing.B) {
	if runtime.GOOS != "linux" {
		b.Skip("needs /proc")
	}
	proc := os.DirFS("/proc")
	for b.Loop() {
		if _, err := scan(proc, "bench-node", nil); err != nil {
			b.Fatal(err)
		}
	}
	entries, _ := os.ReadDir("/proc")
	b.ReportMetric(float64(len(entries)), "proc-entries")
}
