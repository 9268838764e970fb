//go:build e2e

package e2etest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestBrowserLoginSpawnJupyterLab drives headless Debian Chromium (e2e/browser/login-spawn.mjs):
// log in as alice, pick the time-sliced T4 profile on the spawn form, land in JupyterLab. The
// screenshots go to e2e/artifacts/.
func TestBrowserLoginSpawnJupyterLab(t *testing.T) {
	modules := os.Getenv("GPUHUB_BROWSER_MODULES")
	chromium := os.Getenv("GPUHUB_CHROMIUM")
	if modules == "" || chromium == "" {
		t.Fatal("GPUHUB_BROWSER_MODULES and GPUHUB_CHROMIUM must be set; run `make e2e` (it installs playwright-core and chromium)")
	}
	artifacts, err := filepath.Abs(filepath.Join("..", "artifacts"))
	if err != nil {
		t.Fatal(err)
	}
	script, err := filepath.Abs(filepath.Join("..", "browser", "login-spawn.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	defer hub().Stop(t, "alice", "browser")
	cmd := exec.CommandContext(ctx, "node", script)
	cmd.Env = append(os.Environ(),
		"HUB_URL="+st.HubURL(), "HUB_USER=alice", "HUB_PASSWORD="+password, "HUB_SERVER=browser",
		"HUB_PROFILE=t4-shared", "GPUHUB_ARTIFACTS="+artifacts)
	out, err := cmd.CombinedOutput()
	t.Logf("browser output:\n%s", out)
	if err != nil {
		t.Fatalf("browser test failed: %v (screenshots in %s)\nhub log:\n%s", err, artifacts, st.Hub.LogTail(30))
	}
	pod := findPod(ctx, t, "alice", "browser")
	if pod.Spec.NodeName != "gpu-t4-0" {
		t.Errorf("browser-spawned pod on %q, want gpu-t4-0", pod.Spec.NodeName)
	}
}
