//go:build integration

package hubproc_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuhub/gpuhub/e2e/internal/hubproc"
)

// TestStartStop starts a real Hub, runs a single-user server through the admin token, and checks
// that Stop leaves no process behind and releases the ports.
func TestStartStop(t *testing.T) {
	opts := hubproc.OptionsFromEnv()
	opts.Users = []string{"alice"}
	opts.Groups = map[string][]string{"team": {"alice"}}
	opts.Services = []hubproc.Service{{Name: "reader", Scopes: []string{"list:users"}}}
	h := hubproc.StartT(t, opts)

	var root struct{ Version string }
	getJSON(t, h.BaseURL()+"hub/api/", "", &root)
	if root.Version != h.Version() {
		t.Errorf("GET /hub/api/ version %q, venv has %q", root.Version, h.Version())
	}
	t.Logf("jupyterhub %s, config %s", h.Version(), h.ConfigPath())

	var who struct {
		Kind, Name string
		Scopes     []string
	}
	getJSON(t, h.APIURL()+"/user", h.ServiceToken("reader"), &who)
	if who.Kind != "service" || who.Name != "reader" || !strings.Contains(strings.Join(who.Scopes, " "), "list:users") {
		t.Errorf("reader whoami = %+v", who)
	}

	// A running single-user server exercises the spawner settings and the cleanup on Stop.
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, h.APIURL()+"/users/alice/server", http.NoBody)
	req.Header.Set("Authorization", "token "+h.AdminToken())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusAccepted {
		t.Fatalf("start alice: %s", resp.Status)
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		var u struct {
			Servers map[string]struct{ Ready bool }
		}
		getJSON(t, h.APIURL()+"/users/alice", h.AdminToken(), &u)
		if u.Servers[""].Ready {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("alice's server not ready after 90s:\n%s", h.LogTail(40))
		}
		time.Sleep(300 * time.Millisecond)
	}
	if n := len(hubproc.MarkedProcesses(h.Marker())); n < 3 {
		t.Errorf("marked processes = %d, want hub, proxy and single-user server at least", n)
	}

	proxy, proxyAPI, hub := h.Ports()
	if err := h.Stop(); err != nil {
		t.Errorf("Stop: %v", err)
	}
	if left := hubproc.MarkedProcesses(h.Marker()); len(left) > 0 {
		t.Errorf("processes left after Stop: %v", left)
	}
	for _, p := range []int{proxy, proxyAPI, hub} {
		l, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Errorf("port %d not released: %v", p, err)
			continue
		}
		l.Close()
	}
}

func getJSON(t *testing.T, url, token string, v any) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, http.NoBody)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "token "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

const envOrphanChild = "HUBPROC_TEST_ORPHAN_CHILD"

// TestOrphanCleanup kills a test binary that started a Hub without calling Stop (as a go test
// -timeout panic would) and checks that the Hub and its proxy go away on their own.
func TestOrphanCleanup(t *testing.T) {
	if os.Getenv(envOrphanChild) != "" {
		h, err := hubproc.Start(context.Background(), hubproc.OptionsFromEnv())
		if err != nil {
			t.Fatal(err)
		}
		fmt.Printf("marker=%s workdir=%s\n", h.Marker(), h.WorkDir())
		select {} // wait to be killed
	}

	child := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestOrphanCleanup$", "-test.v")
	child.Env = append(os.Environ(), envOrphanChild+"=1")
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	var marker, workDir string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if _, err := fmt.Sscanf(sc.Text(), "marker=%s workdir=%s", &marker, &workDir); err == nil {
			break
		}
	}
	if marker == "" {
		_ = child.Wait()
		t.Fatal("child test binary did not report a started Hub")
	}
	t.Cleanup(func() { os.RemoveAll(workDir) })
	if n := len(hubproc.MarkedProcesses(marker)); n < 2 {
		t.Fatalf("marked processes before kill = %d, want hub and proxy", n)
	}

	_ = child.Process.Signal(syscall.SIGKILL)
	_ = child.Wait()
	deadline := time.Now().Add(30 * time.Second)
	for len(hubproc.MarkedProcesses(marker)) > 0 {
		if time.Now().After(deadline) {
			left := hubproc.MarkedProcesses(marker)
			for _, pid := range left {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			t.Fatalf("processes of the orphaned Hub still running 30s after its parent died: %v", left)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
