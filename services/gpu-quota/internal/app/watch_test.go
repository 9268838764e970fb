package app

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuhub/gpuhub/services/internal/contract"
)

// watchOpts are two choices of the test cluster: a MIG 1g.5gb slice and a whole H100.
const watchOpts = `{"options":[{"id":"mig-1g","resources":{"nvidia.com/mig-1g.5gb":1},
	"nodeSelector":{"nvidia.com/gpu.product":"NVIDIA-A100-SXM4-40GB","nvidia.com/mig.strategy":"mixed"}},
	{"id":"h100","resources":{"nvidia.com/gpu":1},"nodeSelector":{"nvidia.com/gpu.product":"NVIDIA-H100-80GB-HBM3"}}]}`

// fastWatch looks for changes every 20 ms.
func fastWatch(o *Options) { o.VerdictInterval = 20 * time.Millisecond }

// verdictStream reads a watch's lines as they come: "bob [students] mig-1g=ok h100=kind_not_allowed", "synced".
type verdictStream struct {
	lines chan string
	resp  *http.Response
}

// watchVerdicts opens a watch at r as gpu-usage (a reader service).
func watchVerdicts(t *testing.T, r *running) *verdictStream {
	t.Helper()
	r.hub.AddToken("usage-token", "gpu-usage")
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, r.url+prefix+"api/v1/assess/watch", strings.NewReader(watchOpts))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "token usage-token")
	// A stream whose start is held back (a relay that does not flush) fails here within 10 s.
	client := &http.Client{Transport: &http.Transport{ResponseHeaderTimeout: 10 * time.Second}}
	t.Cleanup(client.CloseIdleConnections)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("watch: %s", resp.Status)
	}
	s := &verdictStream{lines: make(chan string, 100), resp: resp}
	go func() {
		defer close(s.lines)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var l contract.VerdictLine
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				s.lines <- "bad line: " + sc.Text()
				continue
			}
			if l.Kind != contract.WatchUser {
				s.lines <- strings.TrimSpace(l.Kind + " " + l.User)
				continue
			}
			line := fmt.Sprintf("%s %v", l.User, l.Groups)
			for _, v := range l.Options {
				line += " " + v.ID + "=" + v.Reason
			}
			s.lines <- line
		}
	}()
	return s
}

// next returns the next n lines other than keepalives, failing after 10 s.
func (s *verdictStream) next(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	timeout := time.After(10 * time.Second)
	for len(out) < n {
		select {
		case l, ok := <-s.lines:
			if !ok {
				t.Fatalf("the stream ended after %v", out)
			}
			if l != contract.WatchKeepalive {
				out = append(out, l)
			}
		case <-timeout:
			t.Fatalf("no line within 10 s after %v", out)
		}
	}
	return out
}

// ended waits for the end of the stream (lines until then are dropped) and says how long it took.
func (s *verdictStream) ended(t *testing.T, within time.Duration) time.Duration {
	t.Helper()
	begin := time.Now()
	timeout := time.After(within)
	for {
		select {
		case _, ok := <-s.lines:
			if !ok {
				return time.Since(begin)
			}
		case <-timeout:
			t.Fatalf("the stream did not end within %v", within)
		}
	}
}

// firstTable is the table of the test Hub's users before anything happens.
var firstTable = []string{
	"alice [] mig-1g=ok h100=ok",
	"bob [students] mig-1g=ok h100=kind_not_allowed",
	"carol [researchers] mig-1g=ok h100=ok",
	"synced",
}

// TestWatchOverHTTP: the first table is every user of the Hub's directory; a pod, a reservation and a policy
// reload each send the lines of the users whose verdicts they change, and nothing else; while nothing
// changes, passes are skipped.
func TestWatchOverHTTP(t *testing.T) {
	r := start(t, fastWatch)
	s := watchVerdicts(t, r)
	if diff := cmp.Diff(firstTable, s.next(t, 4)); diff != "" {
		t.Fatalf("first table (-want +got):\n%s", diff)
	}
	skipped := func() float64 { return counterOrGauge(t, r, "gpuhub_quota_verdict_passes_total", "skipped") }
	before := skipped()
	eventually(t, "passes skipped while nothing changes", func() bool { return skipped() >= before+3 })

	steps := []struct {
		name   string
		change func(t *testing.T)
		want   []string
	}{
		{"bob's other server's pod", func(t *testing.T) {
			p := gpuPod("jupyter-bob-lab", "bob", "gpu-a100", "nvidia.com/mig-1g.5gb")
			p.Annotations["hub.jupyter.org/servername"] = "lab"
			if _, err := r.kube.CoreV1().Pods("jhub").Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}, []string{"bob [students] mig-1g=max_servers h100=kind_not_allowed"}},
		{"alice's other server admitted (reserved)", func(t *testing.T) { admitAliceX(t, r) },
			[]string{"alice [] mig-1g=ok h100=max_gpus"}},
		{"a policy reload: students may take whole GPUs", func(t *testing.T) {
			good := strings.Replace(goodPolicy, "allowedKinds: [mig, shared]", "allowedKinds: [gpu, mig, shared]", 1)
			if err := replaceFile(r.policy, []byte(good), 0o644); err != nil {
				t.Fatal(err)
			}
		}, []string{"bob [students] mig-1g=max_servers h100=max_gpus"}},
	}
	for _, step := range steps {
		step.change(t)
		if diff := cmp.Diff(step.want, s.next(t, len(step.want))); diff != "" {
			t.Errorf("%s: lines (-want +got):\n%s", step.name, diff)
		}
	}
	select {
	case l := <-s.lines:
		if l != contract.WatchKeepalive {
			t.Errorf("a line nothing called for: %s", l)
		}
	case <-time.After(200 * time.Millisecond):
	}
}

// TestWatchEndsOnStop: a stopping gpu-quota ends its watches at once, so its graceful shutdown does not wait
// for them (it would wait its whole timeout, 15 s).
func TestWatchEndsOnStop(t *testing.T) {
	r := start(t, fastWatch)
	s := watchVerdicts(t, r)
	s.next(t, 4)
	r.cancel()
	if d := s.ended(t, 5*time.Second); d > 2*time.Second {
		t.Errorf("the stream ended %v after the stop", d)
	}
	select {
	case err := <-r.done:
		r.done <- err // for start's cleanup
	case <-time.After(5 * time.Second):
		t.Fatal("Run still running 5 s after the stop: the watch holds the graceful shutdown")
	}
}

// TestWatchThroughStandby: a watch sent to the standby is relayed to the decider, line by line as they come;
// it ends when the decider stops, and the watch made again gets the next decider's whole table. A standby
// that stops ends the streams it relays.
func TestWatchThroughStandby(t *testing.T) {
	decider, standby := twoReplicas(t, fastWatch)
	decider.hub.AddToken("usage-token", "gpu-usage") // the decider checks the token it is relayed
	s := watchVerdicts(t, standby)
	if diff := cmp.Diff(firstTable, s.next(t, 4)); diff != "" {
		t.Fatalf("first table through the standby (-want +got):\n%s", diff)
	}
	admitAliceX(t, decider)
	if diff := cmp.Diff([]string{"alice [] mig-1g=ok h100=max_gpus"}, s.next(t, 1)); diff != "" {
		t.Errorf("a change through the standby (-want +got):\n%s", diff)
	}

	decider.cancel()
	s.ended(t, 5*time.Second)
	if err := <-decider.done; err != nil {
		t.Errorf("the old decider's Run: %v", err)
	}
	decider.done <- nil // for start's cleanup
	eventually(t, "the standby decides", func() bool { return standby.deciding(t) })
	again := watchVerdicts(t, standby)
	// The new decider counts alice's reservation too: it mirrored the old decider's.
	want := append([]string{"alice [] mig-1g=ok h100=max_gpus"}, firstTable[1:]...)
	if diff := cmp.Diff(want, again.next(t, 4)); diff != "" {
		t.Errorf("the next decider's table (-want +got):\n%s", diff)
	}
}

// TestRelayedWatchEndsWhenStandbyStops: the standby's own stop ends the watches it relays.
func TestRelayedWatchEndsWhenStandbyStops(t *testing.T) {
	decider, standby := twoReplicas(t, fastWatch)
	decider.hub.AddToken("usage-token", "gpu-usage")
	s := watchVerdicts(t, standby)
	s.next(t, 4)
	standby.cancel()
	if d := s.ended(t, 5*time.Second); d > 2*time.Second {
		t.Errorf("the relayed stream ended %v after the standby's stop", d)
	}
	select {
	case err := <-standby.done:
		standby.done <- err
	case <-time.After(10 * time.Second):
		t.Fatal("the standby's Run still running 10 s after its stop: the relayed watch holds its shutdown")
	}
}

// admitAliceX admits a MIG slice for alice's server "x" at r: its reservation counts in her default server's
// verdicts (1/7 held: no whole H100 within her 1 GPU).
func admitAliceX(t *testing.T, r *running) {
	t.Helper()
	if code, res := r.admit(t, http.DefaultClient, `{"user":"alice","server":"x","resources":{"nvidia.com/mig-1g.5gb":1},
		"nodeSelector":{"nvidia.com/gpu.product":"NVIDIA-A100-SXM4-40GB","nvidia.com/mig.strategy":"mixed"}}`); code != 200 || !res.Allow {
		t.Fatalf("admit: %d %+v", code, res)
	}
}
