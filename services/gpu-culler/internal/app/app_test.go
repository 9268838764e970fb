package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpuhub/gpuhub/hubapi"
	"github.com/gpuhub/gpuhub/hubapi/hubapitest"
	"github.com/gpuhub/gpuhub/services/gpu-culler/internal/decide"
	"github.com/gpuhub/gpuhub/services/gpu-culler/internal/notices"
	cpolicy "github.com/gpuhub/gpuhub/services/gpu-culler/internal/policy"
	"github.com/gpuhub/gpuhub/services/internal/policy"
	"github.com/gpuhub/gpuhub/services/internal/server"
)

const testPolicy = `
every: 10m
gpu:
  idlePeriod: 30m
  warn: 10m
cpu:
  idlePeriod: 1h
  warn: 10m
  action: stop-and-remove
`

// userPod is a KubeSpawner single-user pod of user's server, with the culler's notice when n is set.
func userPod(user, server string, n *decide.Notice, r cpolicy.Rule) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "jupyter-" + user + "-" + server, Namespace: "jhub", ResourceVersion: "1",
		CreationTimestamp: metav1.NewTime(time.Now().Add(-3 * time.Hour)), // as the Hub's started
		Labels:            map[string]string{"component": "singleuser-server"},
		Annotations:       map[string]string{"hub.jupyter.org/username": user, "hub.jupyter.org/servername": server}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "notebook"}}}}
	if n != nil {
		b, _ := json.Marshal(notices.Notice(n.Reason, "stops soon", n.Deadline, n.Since, 0, r))
		p.Annotations[notices.Key] = string(b)
	}
	return p
}

// The wiring end to end on fakes: the pass reads the Hub's ready list page by page through the client whose
// requests it counts, stops the CPU-only server whose notice ran out (and removes it, a named one), leaves the
// others, reads gpu-quota's waitlist, and serves its probes and metrics. Hub requests = pages + stops, and the culler's count is the Hub's.
// It leads under a Lease; the Lease and the stops ConfigMap it creates are owned by its Deployment.
func TestRunPassesAndCountsHubRequests(t *testing.T) {
	now := time.Now().UTC()
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(path, []byte(testPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	var pol cpolicy.Policy
	if err := policy.Load(path, &pol); err != nil {
		t.Fatal(err)
	}

	hub := hubapitest.New(t)
	hub.SetPageLimits(2, 2)
	hub.AddToken("culler-token", "gpu-culler", "list:users", "read:users:activity", "read:servers", "delete:servers")
	started, idle := now.Add(-3*time.Hour), now.Add(-2*time.Hour)
	for _, name := range []string{"alice", "bob", "carol", "dave", "erin"} {
		s := hubapi.Server{Name: "lab", Ready: true, Started: &started, LastActivity: &now, URL: "/user/" + name + "/lab/"}
		if name == "carol" {
			s.LastActivity = &idle
		}
		hub.AddUser(hubapi.User{Name: name, Servers: map[string]hubapi.Server{"lab": s}})
	}
	var pods []*corev1.Pod
	for _, name := range []string{"alice", "bob", "dave", "erin"} {
		pods = append(pods, userPod(name, "lab", nil, pol.Rule("", "")))
	}
	pods = append(pods, userPod("carol", "lab", &decide.Notice{Reason: decide.ReasonIdle, Since: now.Add(-11 * time.Minute),
		Deadline: now.Add(-time.Minute)}, pol.Rule("", "")))
	// gpu-culler's own Deployment: the Lease and the stops ConfigMap it creates are owned by it.
	kc := fake.NewClientset(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "gpuhub", Name: "gpuhub-culler", UID: "uid-culler"}})
	for _, p := range pods {
		if _, err := kc.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	usage := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/services/gpu-usage/api/v1/servers" || r.Header.Get("Authorization") != "token culler-token" {
			http.Error(w, `{"message":"no"}`, http.StatusForbidden)
			return
		}
		_, _ = fmt.Fprintf(w, `{"sampledAt":%q,"servers":[]}`, time.Now().UTC().Format(time.RFC3339Nano))
	}))
	t.Cleanup(usage.Close)
	waitlist := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/services/gpu-quota/api/v1/waitlist/contended" || r.Header.Get("Authorization") != "token culler-token" {
			http.Error(w, `{"message":"no"}`, http.StatusForbidden)
			return
		}
		_, _ = fmt.Fprintf(w, `{"asOf":%q,"classes":[{"class":"gpu H100-80GB-HBM3","kind":"gpu","waiting":1}]}`, time.Now().UTC().Format(time.RFC3339))
	}))
	t.Cleanup(waitlist.Close)

	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan *server.Server, 1)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{
			Logger: slog.New(slog.DiscardHandler), Registry: reg, Listener: ln, Prefix: "/services/gpu-culler/",
			PolicyPath: path, Kube: kc, Namespace: "jhub",
			HubConfig: hubapi.Config{URL: hub.URL(), Token: "culler-token"}, Token: "culler-token",
			Auth: func(h http.Handler) http.Handler { return h }, UsageURL: usage.URL + "/services/gpu-usage/",
			SampleEvery: time.Second, QuotaURL: waitlist.URL + "/services/gpu-quota/", ContentionEvery: time.Second,
			LeaderElect: true, LeaseNamespace: "gpuhub", LeaseName: "gpuhub-culler", Identity: "gpuhub-culler-a", OwnerDeployment: "gpuhub-culler",
			StopsConfigMap: "gpu-culler-stops",
			OnServing:      func(s *server.Server) { served <- s },
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	var base string
	select {
	case s := <-served:
		base = "http://" + s.Addr().String()
	case err := <-done:
		t.Fatalf("Run ended before serving: %v", err)
	}

	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(get(t, base+"/metrics"), `gpuhub_culler_passes_total{result="ok"} 1`) {
		if time.Now().After(deadline) {
			t.Fatalf("no pass within 20 s; metrics:\n%s", get(t, base+"/metrics"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	metrics := get(t, base+"/metrics")
	got := map[string]string{}
	for _, line := range strings.Split(metrics, "\n") {
		for _, name := range []string{"gpuhub_culler_hub_requests_total", "gpuhub_culler_stops_total", "gpuhub_culler_servers{"} {
			if strings.HasPrefix(line, name) {
				k, v, _ := strings.Cut(line, " ")
				got[k] = v
			}
		}
	}
	want := map[string]string{
		`gpuhub_culler_hub_requests_total{op="users_list"}`:   fmt.Sprint(hub.Requests("GET /users")),
		`gpuhub_culler_hub_requests_total{op="server_stop"}`:  "1",
		`gpuhub_culler_stops_total{kind="cpu",reason="idle"}`: "1",
		`gpuhub_culler_servers{state="none"}`:                 "4",
		`gpuhub_culler_servers{state="stop"}`:                 "1",
		`gpuhub_culler_servers{state="skip"}`:                 "0",
		`gpuhub_culler_servers{state="warn"}`:                 "0",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
	// The waitlist is polled with the culler's token: someone waits for an H100.
	for !strings.Contains(get(t, base+"/metrics"), "gpuhub_culler_contended_classes 1") {
		if time.Now().After(deadline) {
			t.Fatalf("the waitlist was not read within 20 s; metrics:\n%s", get(t, base+"/metrics"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := hub.Requests("GET /users"); n != 3 {
		t.Errorf("the pass read %d pages of 5 users at 2 a page, want 3", n)
	}
	if n := hub.Requests("DELETE /users/carol/servers/lab"); n != 1 {
		t.Errorf("carol's server: %d stops, want 1", n)
	}
	if u, _ := hub.User("carol"); len(u.Servers) != 0 {
		t.Errorf("carol's named server is not removed: %+v", u.Servers)
	}
	if hub.TotalRequests() != hub.Requests("GET /users")+1 {
		t.Errorf("the Hub saw %d requests, want pages + stops = %d", hub.TotalRequests(), hub.Requests("GET /users")+1)
	}

	// What the culler created at run time goes with its Deployment (helm uninstall).
	wantOwners := []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "gpuhub-culler", UID: "uid-culler"}}
	lease, err := kc.CoordinationV1().Leases("gpuhub").Get(context.Background(), "gpuhub-culler", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wantOwners, lease.OwnerReferences); diff != "" {
		t.Errorf("Lease owners (-want +got):\n%s", diff)
	}
	cm, err := kc.CoreV1().ConfigMaps("gpuhub").Get(context.Background(), "gpu-culler-stops", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wantOwners, cm.OwnerReferences); diff != "" {
		t.Errorf("stops ConfigMap owners (-want +got):\n%s", diff)
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A policy that exempts by group needs read:users:groups; without it the culler refuses the policy rather than
// treat an exempt user as not exempt. Unknown scopes (nil) are not checked.
func TestCheckScopes(t *testing.T) {
	var groups, none cpolicy.Policy
	if err := policy.Decode("groups.yaml", []byte("exempt:\n  groups: [staff]\n"), &groups); err != nil {
		t.Fatal(err)
	}
	if err := policy.Decode("none.yaml", []byte("every: 1m\n"), &none); err != nil {
		t.Fatal(err)
	}
	four := []string{"list:users", "read:users:activity", "read:servers", "delete:servers"}
	tests := []struct {
		name   string
		p      *cpolicy.Policy
		scopes []string
		ok     bool
	}{
		{"no group exemption, the four scopes", &none, four, true},
		{"group exemption, the four scopes", &groups, four, false},
		{"group exemption with read:users:groups", &groups, append(four, "read:users:groups"), true},
		{"group exemption with a filtered read:users:groups", &groups, append(four, "read:users:groups!group=staff"), true},
		{"group exemption with read:users:groups for another group", &groups, append(four, "read:users:groups!group=ml"), false},
		{"group exemption with read:users:groups for one user", &groups, append(four, "read:users:groups!user=alice"), false},
		{"group exemption with admin:users", &groups, append(four, "admin:users"), true},
		{"scopes unknown", &groups, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckScopes(tt.p, tt.scopes)
			if (err == nil) != tt.ok {
				t.Fatalf("CheckScopes = %v, want ok %v", err, tt.ok)
			}
			if err != nil && !strings.Contains(err.Error(), "read:users:groups") {
				t.Errorf("the error does not name the scope to add: %v", err)
			}
		})
	}
}

// The telemetry reaches back the longest idle period of any GPU rule, plus the warning.
func TestWindow(t *testing.T) {
	var p cpolicy.Policy
	yaml := "gpu:\n  idlePeriod: 1h\n  warn: 15m\nkinds:\n  shared:\n    idlePeriod: 2h\nprofiles:\n  gpu-big:\n    hubIdlePeriod: 3h\n"
	if err := policy.Decode("p.yaml", []byte(yaml), &p); err != nil {
		t.Fatal(err)
	}
	if got, want := Window(&p), 3*time.Hour+15*time.Minute; got != want {
		t.Errorf("Window = %v, want %v", got, want)
	}
}

// A policy that sets idleWhenContended anywhere needs the waitlist (the culler says so when --quota-url is empty).
func TestUsesContention(t *testing.T) {
	for yaml, want := range map[string]bool{
		"gpu:\n  idlePeriod: 1h\n":                                       false,
		"gpu:\n  idleWhenContended: 20m\n":                               true,
		"kinds:\n  shared:\n    idleWhenContended: 20m\n":                true,
		"profiles:\n  gpu-h100-80gb-hbm3:\n    idleWhenContended: 20m\n": true,
	} {
		var p cpolicy.Policy
		if err := policy.Decode("p.yaml", []byte(yaml), &p); err != nil {
			t.Fatal(err)
		}
		if got := usesContention(&p); got != want {
			t.Errorf("%q: usesContention = %v, want %v", yaml, got, want)
		}
	}
}
