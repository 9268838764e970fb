//go:build integration

// This test runs snoozes against a real control plane (etcd, kube-apiserver with RBAC): while a pass-like
// writer keeps rewriting the culler's notice on a pod from its informer copy, as the leader's pass does, users
// snooze it from other replicas. Every write carries the pod's resourceVersion, so the API server refuses the
// one that read an old pod, and no snooze is lost: in the end the notice counts every snooze that succeeded,
// and its deadline moved by each. The client holds only what the culler's Role gives on pods (get, list,
// watch, patch). Run it with
//
//	GPUHUB_KUBE_BIN=~/.cache/gpuhub/kube/v1.36.3/bin go test -tags integration -run TestAgainstAPIServer ./services/gpu-culler/internal/snooze
//
// (etcd from PATH or GPUHUB_ETCD).
package snooze

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/gpuhub/gpuhub/e2e/cluster"
	"github.com/gpuhub/gpuhub/services/gpu-culler/internal/decide"
	"github.com/gpuhub/gpuhub/services/gpu-culler/internal/notices"
	"github.com/gpuhub/gpuhub/services/gpu-culler/internal/policy"
	"github.com/gpuhub/gpuhub/services/internal/decision"
	ipolicy "github.com/gpuhub/gpuhub/services/internal/policy"
)

const cullerUser = "gpuhub:gpu-culler-test"

func TestAgainstAPIServer(t *testing.T) {
	bin := os.Getenv("GPUHUB_KUBE_BIN")
	if bin == "" {
		t.Fatal("GPUHUB_KUBE_BIN is not set: run `make kube-binaries` and point it at ~/.cache/gpuhub/kube/<version>/bin")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cp, err := cluster.Start(ctx, cluster.Options{BinDir: bin, Etcd: os.Getenv("GPUHUB_ETCD"), Controllers: []string{"namespace-controller"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Stop)
	admin := clientFor(t, cp, "admin", []string{"system:masters"})
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "jhub"}}, metav1.CreateOptions{}))
	// No service-account controller runs: the pod's account is made here.
	must(admin.CoreV1().ServiceAccounts("jhub").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}))
	must(admin.RbacV1().Roles("jhub").Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "gpu-culler-pods"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch", "patch"}}}},
		metav1.CreateOptions{}))
	must(admin.RbacV1().RoleBindings("jhub").Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "gpu-culler-pods"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "gpu-culler-pods"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: cullerUser}}}, metav1.CreateOptions{}))
	c := clientFor(t, cp, cullerUser, nil)

	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "jhub", Name: "jupyter-alice", Labels: map[string]string{"component": "singleuser-server"},
		Annotations: map[string]string{"hub.jupyter.org/username": "alice", "hub.jupyter.org/servername": ""}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "notebook", Image: "jupyter/minimal-notebook"}}}}
	must(admin.CoreV1().Pods("jhub").Create(ctx, pod, metav1.CreateOptions{}))

	var pol policy.Policy
	if err := ipolicy.Decode("test.yaml", []byte("cpu:\n  idlePeriod: 1h\n  warn: 10m\n  snooze: 1m\n  maxSnoozes: 100\n"), &pol); err != nil {
		t.Fatal(err)
	}
	rule := pol.Rule("", "")
	start := time.Now().UTC().Truncate(time.Second)
	first := start.Add(10 * time.Minute)

	// The culler's informer copy of the pods, as the pass and the API read them.
	f := informers.NewSharedInformerFactoryWithOptions(c, 0, informers.WithNamespace("jhub"))
	lister := f.Core().V1().Pods().Lister()
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	cached := func() *corev1.Pod {
		p, err := lister.Pods("jhub").Get("jupyter-alice")
		if err != nil {
			t.Error(err)
			return pod
		}
		return p
	}

	// The first warning. The harness's kube-scheduler marks the pod unschedulable (no nodes) at some moment
	// after its creation, which conflicts with a write that read the pod before: read it again then.
	warn := notices.Build(decide.Decision{Action: decide.Warn, Reason: decide.ReasonIdle, Deadline: first, Message: "pass 0"}, rule, decide.Notice{}, start)
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		fresh, err := c.CoreV1().Pods("jhub").Get(ctx, "jupyter-alice", metav1.GetOptions{})
		if err != nil {
			return err
		}
		return notices.Write(ctx, c, fresh, &warn)
	}); err != nil {
		t.Fatal(err)
	}
	// The pass and the snoozes read the informer's copy: the race starts once it holds the warning.
	for {
		if _, _, ok := notices.FromPod(cached().Annotations); ok {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the informer never saw the first warning")
		}
		time.Sleep(10 * time.Millisecond)
	}

	log, err := decision.NewLog(decision.Options{Service: "gpu-culler"})
	if err != nil {
		t.Fatal(err)
	}
	s := New(Options{Client: c, Decisions: log, Policy: func() *policy.Policy { return &pol },
		Pods: func(user, server string) (*corev1.Pod, bool) { return cached(), user == "alice" && server == "" }})

	// The pass: rewrites the notice from its informer copy, keeping what is on it (decide keeps the later
	// deadline and the snoozes), as fast as it can, until the snoozes are done.
	var passWrites, passConflicts atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 1; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			p := cached()
			prev, _, ok := notices.FromPod(p.Annotations)
			if !ok {
				t.Error("the notice is gone")
				return
			}
			d := decide.Decision{Action: decide.Warn, Reason: decide.ReasonIdle, Deadline: prev.Deadline, Message: fmt.Sprintf("pass %d", i)}
			n := notices.Build(d, rule, prev, time.Now())
			err := notices.Write(ctx, c, p, &n)
			switch {
			case err == nil:
				passWrites.Add(1)
			case apierrors.IsConflict(err):
				passConflicts.Add(1)
			default:
				t.Errorf("pass write: %v", err)
				return
			}
		}
	}()

	// Users snooze from three replicas at once.
	const snoozers, each = 3, 10
	var ok, busy atomic.Int64
	var sw sync.WaitGroup
	for range snoozers {
		sw.Add(1)
		go func() {
			defer sw.Done()
			for range each {
				_, err := s.Snooze(ctx, "alice", "alice", "")
				switch {
				case err == nil:
					ok.Add(1)
				case errors.Is(err, ErrBusy):
					busy.Add(1)
				default:
					t.Errorf("snooze: %v", err)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	sw.Wait()
	close(done)
	wg.Wait()

	final, err := c.CoreV1().Pods("jhub").Get(ctx, "jupyter-alice", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, n, _ := notices.FromPod(final.Annotations)
	t.Logf("%d snoozes, %d busy; the pass wrote %d times and conflicted %d times; last message %q",
		ok.Load(), busy.Load(), passWrites.Load(), passConflicts.Load(), n.Message)
	if int64(got.Snoozes) != ok.Load() {
		t.Errorf("the notice counts %d snoozes, %d succeeded: a write lost a snooze", got.Snoozes, ok.Load())
	}
	if want := first.Add(time.Duration(ok.Load()) * rule.Snooze); !got.Deadline.Equal(want) {
		t.Errorf("deadline %v, want %v (%d snoozes of %s)", got.Deadline, want, ok.Load(), rule.Snooze)
	}
	if recs := log.List(decision.Filter{Action: decision.ActionSnooze}); int64(len(recs)) != ok.Load() {
		t.Errorf("%d snooze decisions for %d snoozes", len(recs), ok.Load())
	}
	if ok.Load() < snoozers*each/2 || passWrites.Load() == 0 || passConflicts.Load() == 0 {
		t.Errorf("the race did not happen as meant: %d snoozes, %d pass writes, %d pass conflicts", ok.Load(), passWrites.Load(), passConflicts.Load())
	}
}

func clientFor(t *testing.T, cp *cluster.ControlPlane, user string, groups []string) kubernetes.Interface {
	t.Helper()
	cfg, err := cp.RESTConfig(user, groups)
	if err != nil {
		t.Fatal(err)
	}
	return kubernetes.NewForConfigOrDie(cfg)
}
