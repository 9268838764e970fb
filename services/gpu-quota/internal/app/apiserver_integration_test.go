//go:build integration

// This test runs gpu-quota replicas in-process against a real kube-apiserver (e2e/cluster), each as the user
// the chart's RBAC names (nodes read; pods read and patched; its own Lease and Deployment): what the client-go
// fake cannot show is the election on a real Lease and each replica's own informers. Run it with
//
//	GPUHUB_KUBE_BIN=~/.cache/gpuhub/kube/v1.36.3/bin go test -tags integration -run APIServer ./services/gpu-quota/internal/app/
package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gpuhub/gpuhub/e2e/cluster"
	"github.com/gpuhub/gpuhub/hubapi"
	"github.com/gpuhub/gpuhub/hubapi/hubapitest"
	"github.com/gpuhub/gpuhub/hubapi/hubauth"
	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/admit"
	"github.com/gpuhub/gpuhub/services/internal/server"
)

// The race of B2: 1,000 spawns at once of one racer, each for one H200 on its own server, against the racers'
// limit of raceLimit whole GPUs, on a node of 8 H200s.
const (
	raceRequests = 1000
	raceLimit    = 7
	podNS        = "jhub"
	quotaUser    = "gpu-quota"
	quotaLease   = "gpuhub-quota"
)

// racePolicy is B2's for the racers (services/gpu-quota/internal/bench, which imports this package).
var racePolicy = fmt.Sprintf(`onUnavailable: open
default:
  maxGPUs: 1
  maxServers: 2
groups:
  racers:
    maxGPUs: %d
    maxServers: unlimited
    allowedKinds: [gpu]
    budgets: []
`, raceLimit)

// apiserverEnv is the control plane, the admin client, and what every replica shares.
type apiserverEnv struct {
	t      *testing.T
	ctx    context.Context
	admin  kubernetes.Interface
	asUser *rest.Config
	hub    *hubapitest.Hub
	policy string
	// servers numbers the racers' servers: each request its own.
	servers atomic.Int64
	// products are the race nodes' GPU products by label: gpu-quota counts free units per class (kind and
	// product), not per node, so a subtest that counts free units has a product of its own.
	products map[string]string
}

// quotaReplica is one app.Run.
type quotaReplica struct {
	name   string
	url    string
	reg    *prometheus.Registry
	engine *admit.Engine
	cancel context.CancelFunc
	done   chan error
}

// TestAPIServerExactlyNTwoReplicas: two replicas with the chart's RBAC on one Lease admit exactly N of B2's race
// spread over both; two replicas that each decide on their own (today's per-replica memory, here two Leases in two
// namespaces) admit 2N, which shows that the race sees the difference.
func TestAPIServerExactlyNTwoReplicas(t *testing.T) {
	env := startAPIServer(t)
	// Every subtest's node before any replica starts: a replica is ready once its informers have listed them, so no
	// race begins while a replica's watch has not yet seen its node (under load, that came as none_free refusals).
	env.raceNode("limit", "NVIDIA-H200")
	env.raceNode("capacity", "NVIDIA-B200")
	env.raceNode("handover", "NVIDIA-H200")
	env.raceNode("control", "NVIDIA-H200")
	// One pair for the races on one Lease (limit, pods appear, capacity); the handover and the control have their
	// own, on Leases of their own.
	a := env.startReplica(t, "gpu-quota-0", podNS)
	b := env.startReplica(t, "gpu-quota-1", podNS)
	env.waitOneLeads(t, a, b)
	decider, standby := a, b
	if leads(t, b) == 1 {
		decider, standby = b, a
	}
	var limitServers []string

	t.Run("limit", func(t *testing.T) {
		admitted, perReplica, reasons := env.race(t, "racer-limit", "limit", raceRequests, a, b)
		limitServers = admitted
		got := len(admitted)
		t.Logf("%d admitted of %d over two replicas on one Lease (%s); refusals %v", got, raceRequests, perReplica, reasons)
		if got != raceLimit {
			t.Errorf("want exactly %d admitted of %d, got %d (%s)", raceLimit, raceRequests, got, perReplica)
		}
		if reasons["max_gpus"] != raceRequests-raceLimit {
			t.Errorf("refusals %v, want %d max_gpus", reasons, raceRequests-raceLimit)
		}
		// The standby relayed its half to the decider, which decided all of them.
		if n := metricSum(t, standby.reg, "gpuhub_quota_forwarded_total", "ok"); n != raceRequests/2 {
			t.Errorf("%s relayed %v requests, want %d", standby.name, n, raceRequests/2)
		}
		if n := metricSum(t, decider.reg, "gpuhub_quota_decisions_total", ""); n != raceRequests {
			t.Errorf("%s decided %v, want all %d", decider.name, n, raceRequests)
		}
		if n := metricSum(t, standby.reg, "gpuhub_quota_decisions_total", ""); n != 0 {
			t.Errorf("%s, the standby, decided %v, want 0", standby.name, n)
		}
	})

	t.Run("pods appear", func(t *testing.T) {
		if len(limitServers) != raceLimit {
			t.Skip("the limit race did not admit N")
		}
		// KubeSpawner creates the admitted servers' pods: each replica's informer ends its reservation, and the
		// pods count instead.
		for _, s := range limitServers {
			env.createPod(t, "racer-limit", s, "limit")
		}
		for _, r := range []*quotaReplica{decider, standby} {
			eventually(t, r.name+" ends the reservations", func() bool {
				return testutil.ToFloat64(mustCollector(t, r.reg, "gpuhub_quota_reservations")) == 0
			})
		}
		admitted, perReplica, reasons := env.race(t, "racer-limit", "limit", 200, a, b)
		t.Logf("with the 7 pods: %d admitted of 200 (%s); refusals %v", len(admitted), perReplica, reasons)
		if len(admitted) != 0 {
			t.Errorf("admitted %d over the limit the pods hold", len(admitted))
		}
		// Two servers stop: exactly two more.
		for _, s := range limitServers[:2] {
			env.deletePod(t, "racer-limit", s)
		}
		eventually(t, "the decider sees 2 pods gone", func() bool {
			q, err := decider.engine.UserQuota("racer-limit")
			return err == nil && q.Concurrent.HeldGPUs == raceLimit-2
		})
		admitted, perReplica, reasons = env.race(t, "racer-limit", "limit", raceRequests, a, b)
		t.Logf("after 2 pods went: %d admitted of %d (%s); refusals %v", len(admitted), raceRequests, perReplica, reasons)
		if len(admitted) != 2 {
			t.Errorf("want exactly 2 admitted after 2 pods went, got %d", len(admitted))
		}
	})

	t.Run("capacity", func(t *testing.T) {
		// 16 racers, each within their limit, for the only 8 B200s: the class's capacity bounds them.
		admitted, perReplica, reasons := env.race(t, "racer-%d", "capacity", 16, a, b)
		t.Logf("16 racers for 8 B200s: %d admitted (%s); refusals %v", len(admitted), perReplica, reasons)
		if len(admitted) != 8 || reasons["none_free"] != 8 {
			t.Errorf("want exactly 8 admitted and 8 none_free, got %d and %v", len(admitted), reasons)
		}
	})

	t.Run("handover", func(t *testing.T) {
		a := env.startReplica(t, "gpu-quota-4", "quota-h")
		b := env.startReplica(t, "gpu-quota-5", "quota-h")
		env.waitOneLeads(t, a, b)
		decider, standby := a, b
		if leads(t, b) == 1 {
			decider, standby = b, a
		}
		eventually(t, "the standby is in sync", func() bool {
			return testutil.ToFloat64(mustCollector(t, standby.reg, "gpuhub_quota_replica_in_sync")) == 1
		})
		// 4 admitted by the first decider, whose pods have not come yet (a KubeSpawner still creating them).
		if got, _, _ := env.race(t, "racer-handover", "handover", 4, decider); len(got) != 4 {
			t.Fatalf("the first decider admitted %d of 4", len(got))
		}
		// A drain: the decider stops; the standby takes the Lease with the 4 reservations.
		begin := time.Now()
		decider.cancel()
		if err := <-decider.done; err != nil {
			t.Errorf("%s: Run returned %v", decider.name, err)
		}
		decider.done <- nil // for the cleanup
		eventually(t, "the standby decides", func() bool { return leads(t, standby) == 1 && standby.engine.Deciding() })
		t.Logf("%s decides %v after %s began to stop", standby.name, time.Since(begin).Round(time.Millisecond), decider.name)
		admitted, perReplica, reasons := env.race(t, "racer-handover", "handover", raceRequests, standby)
		got := len(admitted)
		t.Logf("after the handover: %d admitted of %d (%s); refusals %v", got, raceRequests, perReplica, reasons)
		if got != raceLimit-4 {
			t.Errorf("the new decider admitted %d, want exactly %d (the old one's 4 reservations count)", got, raceLimit-4)
		}
	})

	t.Run("per-replica memory (control)", func(t *testing.T) {
		// Each replica leads its own Lease (one per namespace, each with the chart's RBAC): two deciders.
		a := env.startReplica(t, "gpu-quota-2", "quota-a")
		b := env.startReplica(t, "gpu-quota-3", "quota-b")
		eventually(t, "both lead", func() bool { return leads(t, a) == 1 && leads(t, b) == 1 })
		admitted, perReplica, reasons := env.race(t, "racer-control", "control", raceRequests, a, b)
		got := len(admitted)
		t.Logf("%d admitted of %d over two deciders (%s); refusals %v", got, raceRequests, perReplica, reasons)
		if got != 2*raceLimit {
			t.Errorf("two deciders: want %d admitted (each its own %d), got %d (%s)", 2*raceLimit, raceLimit, got, perReplica)
		}
	})
}

func startAPIServer(t *testing.T) *apiserverEnv {
	bin := os.Getenv("GPUHUB_KUBE_BIN")
	if bin == "" {
		t.Fatal("GPUHUB_KUBE_BIN is not set: the directory with kube-apiserver, kube-scheduler and kube-controller-manager (make kube-binaries)")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	t.Cleanup(cancel)
	cp, err := cluster.Start(ctx, cluster.Options{BinDir: bin, Etcd: os.Getenv("GPUHUB_ETCD")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Stop)
	adminCfg, err := clientcmd.BuildConfigFromFlags("", cp.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	env := &apiserverEnv{t: t, ctx: ctx, admin: kubernetes.NewForConfigOrDie(adminCfg), hub: hubapitest.New(t), products: map[string]string{}}
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, ns := range []string{podNS, "quota-a", "quota-b", "quota-h"} {
		must(env.admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}))
	}
	// The chart's RBAC (chart/gpuhub/templates/quota.yaml), for the user the replicas run as: nodes cluster-wide,
	// the single-user pods in their namespace, the Lease and the Deployment in the release's namespace.
	subject := []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: quotaUser}}
	must(env.admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: quotaUser},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}}}},
		metav1.CreateOptions{}))
	must(env.admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: quotaUser},
		RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: quotaUser}, Subjects: subject}, metav1.CreateOptions{}))
	must(env.admin.RbacV1().Roles(podNS).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: quotaUser},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch", "patch"}}}},
		metav1.CreateOptions{}))
	must(env.admin.RbacV1().RoleBindings(podNS).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: quotaUser},
		RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: quotaUser}, Subjects: subject}, metav1.CreateOptions{}))
	for _, ns := range []string{podNS, "quota-a", "quota-b", "quota-h"} {
		must(env.admin.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: quotaUser + "-lease"},
			Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create"}},
				{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: []string{quotaLease}, Verbs: []string{"get", "update"}},
				{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, ResourceNames: []string{"gpuhub-quota"}, Verbs: []string{"get"}},
			}}, metav1.CreateOptions{}))
		must(env.admin.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: quotaUser + "-lease"},
			RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: quotaUser + "-lease"}, Subjects: subject}, metav1.CreateOptions{}))
	}
	env.asUser = rest.CopyConfig(adminCfg)
	env.asUser.Impersonate = rest.ImpersonationConfig{UserName: quotaUser}
	// Many concurrent watches and the race's decisions: no client-side throttling of the replicas' own calls.
	env.asUser.QPS, env.asUser.Burst = 100, 200

	env.hub.AddToken("quota-token", "gpu-quota", "list:users", "read:users:name", "read:users:groups", "read:servers", "delete:servers")
	env.hub.AddUser(hubapi.User{Name: "someone"})
	env.policy = filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(env.policy, []byte(racePolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	return env
}

// raceNode adds a node of 8 free GPUs of product for the race named label: each subtest its own. Nodes of one
// product are one class: their free units are counted together.
func (env *apiserverEnv) raceNode(label, product string) {
	t := env.t
	env.products[label] = product
	// As bench.RaceNode, with the subtest's label and product.
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-race-" + label, Labels: map[string]string{"nvidia.com/gpu.present": "true",
		"nvidia.com/gpu.count": "8", "nvidia.com/gpu.product": product, "bench.gpuhub.io/race": label}}}
	alloc := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("512Gi"),
		corev1.ResourcePods: resource.MustParse("110"), "nvidia.com/gpu": resource.MustParse("8")}
	n.Status.Capacity, n.Status.Allocatable = alloc, alloc
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	created, err := env.admin.CoreV1().Nodes().Create(env.ctx, n, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Status = n.Status
	updated, err := env.admin.CoreV1().Nodes().UpdateStatus(env.ctx, created, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The API server gives a new node the not-ready taint and no node lifecycle controller runs here to lift it
	// (as benchkit.Create does).
	updated.Spec.Taints = nil
	if _, err := env.admin.CoreV1().Nodes().Update(env.ctx, updated, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// startReplica runs one replica as the chart's user, electing on the Lease in leaseNS; it returns once the
// replica is ready (informers synced, the Hub read).
func (env *apiserverEnv) startReplica(t *testing.T, name, leaseNS string) *quotaReplica {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(env.ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithCancel(env.ctx)
	r := &quotaReplica{name: name, url: "http://" + ln.Addr().String(), reg: prometheus.NewRegistry(), cancel: rcancel, done: make(chan error, 1)}
	served := make(chan struct{})
	o := Options{
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Registry: r.reg, Listener: ln, Prefix: prefix,
		PolicyPath: env.policy, Kube: kubernetes.NewForConfigOrDie(env.asUser), Namespace: podNS,
		Hub: env.hub.Client("quota-token"), HubRefresh: time.Hour, Token: "quota-token",
		Auth: hubauth.New(hubauth.Options{Hub: env.hub.Client("quota-token")}).Middleware,
		// The Lease counts whole seconds.
		LeaseNamespace: leaseNS, LeaseName: quotaLease, Identity: name, AdvertiseURL: "http://" + ln.Addr().String(),
		LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, LeaseRetryPeriod: 200 * time.Millisecond,
		WhileLeader: func(ctx context.Context, _ Leading) { <-ctx.Done() },
		OnServing:   func(_ *server.Server, e *admit.Engine) { r.engine = e; close(served) },
	}
	go func() { r.done <- Run(rctx, o) }()
	select {
	case <-served:
	case err := <-r.done:
		t.Fatalf("%s: Run: %v", name, err)
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: not serving after 30 s", name)
	}
	t.Cleanup(func() {
		r.cancel()
		if err := <-r.done; err != nil {
			t.Errorf("%s: Run returned %v", name, err)
		}
	})
	eventually(t, name+" ready", func() bool {
		resp, err := http.Get(r.url + "/readyz") //nolint:noctx // a test
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return r
}

func leads(t *testing.T, r *quotaReplica) float64 {
	t.Helper()
	return testutil.ToFloat64(mustCollector(t, r.reg, "gpuhub_quota_leader"))
}

func (env *apiserverEnv) waitOneLeads(t *testing.T, rs ...*quotaReplica) {
	t.Helper()
	eventually(t, "one replica leads", func() bool {
		var n float64
		for _, r := range rs {
			n += leads(t, r)
		}
		return n == 1
	})
}

// race sends n spawns of user at once (a user with %d: each request a user of its own), request i to replica
// i%len(rs), each for one H200 of the subtest's node on its own server (a new one each call); it returns the
// servers admitted, how many per replica asked, and the refusals' reasons.
func (env *apiserverEnv) race(t *testing.T, user, label string, n int, rs ...*quotaReplica) ([]string, string, map[string]int) {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 64, MaxIdleConnsPerHost: 64}, Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	var (
		mu       sync.Mutex
		per      = make([]int, len(rs))
		reasons  = map[string]int{}
		admitted []string
		wg       sync.WaitGroup
	)
	begin := make(chan struct{})
	first := int(env.servers.Add(int64(n))) - n
	for i := range n {
		r := rs[i%len(rs)]
		wg.Go(func() {
			<-begin
			who := user
			if strings.Contains(user, "%d") {
				who = fmt.Sprintf(user, i)
			}
			server := fmt.Sprintf("s%d", first+i)
			body := fmt.Sprintf(`{"user":%q,"server":%q,"groups":["racers"],"resources":{"nvidia.com/gpu":1},
				"nodeSelector":{"nvidia.com/gpu.product":%q,"bench.gpuhub.io/race":%q}}`, who, server, env.products[label], label)
			run := &running{url: r.url}
			code, res := run.admit(t, client, body)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case code != http.StatusOK:
				reasons[fmt.Sprintf("status %d", code)]++
			case res.Allow:
				per[i%len(rs)]++
				admitted = append(admitted, server)
			default:
				reasons[res.Reason]++
			}
		})
	}
	close(begin)
	wg.Wait()
	var parts []string
	for i, n := range per {
		parts = append(parts, fmt.Sprintf("%d of those sent to %s", n, rs[i].name))
	}
	return admitted, strings.Join(parts, ", "), reasons
}

// createPod creates the pod KubeSpawner would for (user, server) on the subtest's node: Pending (no kubelet
// here), one H200.
func (env *apiserverEnv) createPod(t *testing.T, user, server, label string) {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: podNS, Name: "jupyter-" + user + "-" + server,
			Annotations: map[string]string{"hub.jupyter.org/username": user, "hub.jupyter.org/servername": server}},
		Spec: corev1.PodSpec{NodeName: "gpu-race-" + label,
			NodeSelector: map[string]string{"nvidia.com/gpu.product": env.products[label], "bench.gpuhub.io/race": label},
			Containers: []corev1.Container{{Name: "notebook", Image: "jupyter",
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}}}},
	}
	if _, err := env.admin.CoreV1().Pods(podNS).Create(env.ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// deletePod deletes it at once (no kubelet would confirm a graceful deletion).
func (env *apiserverEnv) deletePod(t *testing.T, user, server string) {
	t.Helper()
	zero := int64(0)
	if err := env.admin.CoreV1().Pods(podNS).Delete(env.ctx, "jupyter-"+user+"-"+server, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
}
