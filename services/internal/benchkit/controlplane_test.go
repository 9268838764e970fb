package benchkit

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// buildControlPlane builds e2e/cmd/controlplane for the test and points ControlPlaneEnv at it.
func buildControlPlane(t *testing.T) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "controlplane")
	if out, err := exec.CommandContext(t.Context(), "go", "build", "-o", bin, "github.com/gpuhub/gpuhub/e2e/cmd/controlplane").CombinedOutput(); err != nil {
		t.Fatalf("go build controlplane: %v\n%s", err, out)
	}
	t.Setenv(ControlPlaneEnv, bin)
}

func TestFreePortsThroughTheCommand(t *testing.T) {
	buildControlPlane(t)
	seen := map[int]bool{}
	for range 3 {
		for _, p := range FreePorts(4) {
			if p < 20000 || p > 32767 {
				t.Errorf("port %d is outside 20000-32767 (the harness's range, below the ephemeral ports)", p)
			}
			if seen[p] {
				t.Errorf("port %d handed out twice", p)
			}
			seen[p] = true
		}
	}
	if len(seen) != 12 {
		t.Errorf("%d distinct ports from 3 calls of 4, want 12", len(seen))
	}
}

func TestStartControlPlaneSaysHowToRunIt(t *testing.T) {
	t.Setenv(ControlPlaneEnv, "")
	_, _, err := StartControlPlane(t.Context(), "/nonexistent", "", t.TempDir(), 10)
	if err == nil || !strings.Contains(err.Error(), "make bench-quota") {
		t.Fatalf("StartControlPlane without the command: %v, want an error that names make", err)
	}
}

func TestStartControlPlaneReportsAFailedStart(t *testing.T) {
	buildControlPlane(t)
	_, _, err := StartControlPlane(t.Context(), "/nonexistent-kube-bin", "", t.TempDir(), 10)
	if err == nil || !strings.Contains(err.Error(), "exited before the control plane was ready") {
		t.Fatalf("StartControlPlane with no kube binaries: %v, want the command's early exit", err)
	}
}
