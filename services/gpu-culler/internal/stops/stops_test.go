package stops

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gpuhub/gpuhub/services/gpu-culler/internal/notices/noticestest"
)

var t0 = time.Date(2026, 11, 23, 15, 10, 0, 0, time.UTC)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func newStore(objs ...runtime.Object) (*Store, *fake.Clientset, *clock) {
	c := fake.NewClientset(objs...)
	noticestest.Versioned(c, "configmaps")
	clk := &clock{t: t0}
	return New(Options{Client: c, Namespace: "gpuhub", Now: clk.now}), c, clk
}

func stop(user, server string, at time.Time) Stop {
	return Stop{User: user, Server: server, At: at, Reason: "idle", Message: "Stopped at 15:10 UTC: GPU idle for 1 h 7 min."}
}

func data(t *testing.T, c *fake.Clientset) map[string]string {
	t.Helper()
	cm, err := c.CoreV1().ConfigMaps("gpuhub").Get(context.Background(), DefaultName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cm.Data
}

func TestRecordLastClear(t *testing.T) {
	ctx := context.Background()
	s, c, clk := newStore()
	if _, ok := s.Last("alice"); ok {
		t.Fatal("a stop before any was recorded")
	}
	alice := stop("alice", "", t0)
	if err := s.Record(ctx, alice); err != nil {
		t.Fatal(err)
	}
	if err := s.Record(ctx, stop("bob", "gpu", t0)); err != nil {
		t.Fatal(err)
	}
	got, ok := s.Last("alice")
	if diff := cmp.Diff(alice, got); !ok || diff != "" {
		t.Errorf("Last(alice) = %v (-want +got):\n%s", ok, diff)
	}
	want := map[string]string{
		"616c696365": `{"user":"alice","server":"","at":"2026-11-23T15:10:00Z","reason":"idle","message":"Stopped at 15:10 UTC: GPU idle for 1 h 7 min."}`,
		"626f62":     `{"user":"bob","server":"gpu","at":"2026-11-23T15:10:00Z","reason":"idle","message":"Stopped at 15:10 UTC: GPU idle for 1 h 7 min."}`,
	}
	if diff := cmp.Diff(want, data(t, c)); diff != "" {
		t.Errorf("ConfigMap data (-want +got):\n%s", diff)
	}

	// Clear of another server, or of a user without a stop, asks the API server nothing.
	c.ClearActions()
	for _, us := range [][2]string{{"alice", "other"}, {"carol", ""}} {
		if err := s.Clear(ctx, us[0], us[1]); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(c.Actions()); n != 0 {
		t.Errorf("Clear without a matching stop made %d requests", n)
	}
	if err := s.Clear(ctx, "alice", ""); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Last("alice"); ok {
		t.Error("alice's stop survived Clear")
	}
	if _, ok := data(t, c)["616c696365"]; ok {
		t.Error("alice's entry is still in the ConfigMap")
	}

	clk.add(MaxAge + time.Second)
	if _, ok := s.Last("bob"); ok {
		t.Error("a stop older than MaxAge is still shown")
	}
}

// TestRecordKeepsTheLaterStop: a leader that lost its Lease mid-pass writes the stops it made after the new leader
// wrote a later one of the same user: the later one stays.
func TestRecordKeepsTheLaterStop(t *testing.T) {
	ctx := context.Background()
	s, c, _ := newStore()
	later := stop("alice", "gpu", t0.Add(time.Minute))
	if err := s.Record(ctx, later); err != nil {
		t.Fatal(err)
	}
	c.ClearActions()
	if err := s.Record(ctx, stop("alice", "", t0), stop("bob", "", t0)); err != nil {
		t.Fatal(err)
	}
	if got, ok := s.Last("alice"); !ok || !got.At.Equal(later.At) || got.Server != "gpu" {
		t.Errorf("Last(alice) = %+v, %v; want the later stop of server gpu", got, ok)
	}
	if _, ok := s.Last("bob"); !ok {
		t.Error("bob's stop, written with alice's older one, was not kept")
	}
	c.ClearActions()
	if err := s.Record(ctx, stop("alice", "", t0)); err != nil {
		t.Fatal(err)
	}
	for _, a := range c.Actions() {
		if a.GetVerb() == "update" || a.GetVerb() == "create" {
			t.Errorf("an older stop alone was written: %s", a.GetVerb())
		}
	}
}

func TestWritePrunes(t *testing.T) {
	d := map[string]string{}
	for i := range MaxEntries + 5 {
		st := stop(fmt.Sprintf("user%04d", i), "", t0.Add(-time.Duration(i)*time.Minute))
		b, _ := json.Marshal(st)
		d[Key(st.User)] = string(b)
	}
	old, _ := json.Marshal(stop("old", "", t0.Add(-MaxAge-time.Minute)))
	d[Key("old")] = string(old)
	d[Key("junk")] = "not json"
	s, c, _ := newStore(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "gpuhub", Name: DefaultName, ResourceVersion: "5"}, Data: d})
	if err := s.Record(context.Background(), stop("new", "", t0)); err != nil {
		t.Fatal(err)
	}
	got := data(t, c)
	if len(got) != MaxEntries {
		t.Errorf("%d entries after a write, want %d", len(got), MaxEntries)
	}
	for _, u := range []string{"new", "user0000", fmt.Sprintf("user%04d", MaxEntries-2)} {
		if _, ok := got[Key(u)]; !ok {
			t.Errorf("%s was dropped", u)
		}
	}
	for _, u := range []string{"old", "junk", fmt.Sprintf("user%04d", MaxEntries-1)} {
		if _, ok := got[Key(u)]; ok {
			t.Errorf("%s was kept", u)
		}
	}
	size := 0
	for k, v := range got {
		size += len(k) + len(v)
	}
	if size > 512<<10 {
		t.Errorf("%d bytes at MaxEntries: too close to the 1 MiB of a ConfigMap", size)
	}
}

func TestRecordRetriesAConflict(t *testing.T) {
	s, c, _ := newStore(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "gpuhub", Name: DefaultName, ResourceVersion: "5"}})
	conflicts := 2
	c.PrependReactor("update", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		if conflicts == 0 {
			return false, nil, nil
		}
		conflicts--
		return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "configmaps"}, DefaultName, fmt.Errorf("changed"))
	})
	if err := s.Record(context.Background(), stop("alice", "", t0)); err != nil {
		t.Fatal(err)
	}
	if _, ok := data(t, c)[Key("alice")]; !ok {
		t.Error("the stop was not written after the conflicts")
	}

	conflicts = attempts
	err := s.Record(context.Background(), stop("bob", "", t0))
	if !apierrors.IsConflict(err) || !strings.Contains(err.Error(), "changed by someone else") {
		t.Errorf("after %d conflicts: %v", attempts, err)
	}
}

// TestRunFollowsOtherWriters: a replica that is not the leader serves what the leader wrote.
func TestRunFollowsOtherWriters(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reader, c, _ := newStore()
	done := make(chan struct{})
	go func() { _ = reader.Run(ctx); close(done) }()
	waitFor(t, reader.Synced)

	leader := New(Options{Client: c, Namespace: "gpuhub", Now: func() time.Time { return t0 }})
	if err := leader.Record(ctx, stop("alice", "", t0)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { _, ok := reader.Last("alice"); return ok })
	if err := c.CoreV1().ConfigMaps("gpuhub").Delete(ctx, DefaultName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { _, ok := reader.Last("alice"); return !ok })
	cancel()
	<-done
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatal("timed out")
}

func TestKey(t *testing.T) {
	long := strings.Repeat("a", 127)
	for user, want := range map[string]string{"alice": "616c696365", "jo@x.org": "6a6f40782e6f7267", long: "sha256-"} {
		if got := Key(user); !strings.HasPrefix(got, want) || len(got) > 253 {
			t.Errorf("Key(%.10q) = %q, want %q...", user, got, want)
		}
	}
}

// TestOwner: with an owner (gpu-culler's Deployment) the ConfigMap is created with its reference, and one
// without it gets it at the next write; an earlier owner's reference is kept; without an owner, as before.
func TestOwner(t *testing.T) {
	owner := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "gpuhub-culler", UID: "uid-1"}
	old := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "gpuhub-culler", UID: "uid-0"}
	existing := func(refs ...metav1.OwnerReference) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "gpuhub", Name: DefaultName, ResourceVersion: "5",
			OwnerReferences: refs}}
	}
	tests := map[string]struct {
		existing  *corev1.ConfigMap
		withOwner bool
		want      []metav1.OwnerReference
	}{
		"created with the owner":          {withOwner: true, want: []metav1.OwnerReference{owner}},
		"owner added at the next write":   {existing: existing(), withOwner: true, want: []metav1.OwnerReference{owner}},
		"an earlier owner's is kept":      {existing: existing(old), withOwner: true, want: []metav1.OwnerReference{old, owner}},
		"already owned: left as it is":    {existing: existing(owner), withOwner: true, want: []metav1.OwnerReference{owner}},
		"no owner: created as before":     {},
		"no owner: an existing one as is": {existing: existing(old), want: []metav1.OwnerReference{old}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var objs []runtime.Object
			if tc.existing != nil {
				objs = append(objs, tc.existing)
			}
			c := fake.NewClientset(objs...)
			noticestest.Versioned(c, "configmaps")
			o := Options{Client: c, Namespace: "gpuhub", Now: func() time.Time { return t0 }}
			if tc.withOwner {
				o.Owner = func(context.Context) *metav1.OwnerReference { return &owner }
			}
			s := New(o)
			if err := s.Record(context.Background(), stop("alice", "", t0)); err != nil {
				t.Fatal(err)
			}
			cm, err := c.CoreV1().ConfigMaps("gpuhub").Get(context.Background(), DefaultName, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, cm.OwnerReferences); diff != "" {
				t.Errorf("owners (-want +got):\n%s", diff)
			}
			if _, ok := cm.Data[Key("alice")]; !ok {
				t.Error("the stop was not written")
			}
		})
	}
}
