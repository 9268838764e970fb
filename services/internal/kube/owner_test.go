package kube

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gpuhub/gpuhub/services/internal/logging/logtest"
)

func deployment(ns, name string, uid types.UID) *appsv1.Deployment {
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: uid}}
}

func TestDeploymentOwner(t *testing.T) {
	tests := map[string]struct {
		objs    []runtime.Object
		want    *metav1.OwnerReference
		wantErr string
	}{
		"found: its name and UID": {
			objs: []runtime.Object{deployment("jhub", "gpuhub-quota", "uid-1"), deployment("other", "gpuhub-quota", "uid-2")},
			want: &metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "gpuhub-quota", UID: "uid-1"},
		},
		"missing: the error names it": {
			objs:    []runtime.Object{deployment("other", "gpuhub-quota", "uid-2")},
			wantErr: "owner Deployment jhub/gpuhub-quota",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := DeploymentOwner(context.Background(), fake.NewClientset(tc.objs...), "jhub", "gpuhub-quota")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ownerReference (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWithOwner(t *testing.T) {
	own := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "gpuhub-culler", UID: "new"}
	other := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "gpuhub-culler", UID: "old"}
	tests := map[string]struct {
		refs        []metav1.OwnerReference
		want        []metav1.OwnerReference
		wantChanged bool
	}{
		"none":          {want: []metav1.OwnerReference{own}, wantChanged: true},
		"another kept":  {refs: []metav1.OwnerReference{other}, want: []metav1.OwnerReference{other, own}, wantChanged: true},
		"already there": {refs: []metav1.OwnerReference{other, own}, want: []metav1.OwnerReference{other, own}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, changed := WithOwner(tc.refs, own)
			if diff := cmp.Diff(tc.want, got); diff != "" || changed != tc.wantChanged {
				t.Errorf("changed %v, want %v; refs (-want +got):\n%s", changed, tc.wantChanged, diff)
			}
		})
	}
}

func TestOwnerRef(t *testing.T) {
	unreachable := errors.New("dial tcp 10.96.0.1:443: connect: connection refused")
	tests := map[string]struct {
		deployment string
		objs       []runtime.Object
		// failures is how many GETs fail as an unreachable API server would before the fake answers.
		failures int64
		want     *metav1.OwnerReference
		// wantGets is how many times the Deployment is read (by two calls of Ref).
		wantGets int64
		wantLog  string
	}{
		"no deployment named: no owner, nothing read": {
			objs: []runtime.Object{deployment("jhub", "gpuhub-culler", "uid-1")},
		},
		"found, read once": {
			deployment: "gpuhub-culler", objs: []runtime.Object{deployment("jhub", "gpuhub-culler", "uid-1")},
			want:     &metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "gpuhub-culler", UID: "uid-1"},
			wantGets: 1, wantLog: "uid=uid-1",
		},
		"found after the API server comes back": {
			deployment: "gpuhub-culler", objs: []runtime.Object{deployment("jhub", "gpuhub-culler", "uid-1")}, failures: 3,
			want:     &metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "gpuhub-culler", UID: "uid-1"},
			wantGets: 4, wantLog: "cannot read the owner Deployment yet; retrying",
		},
		"missing: no owner at once, said with its name": {
			deployment: "gpuhub-culler", wantGets: 1,
			wantLog: "running without an owner",
		},
		"API server never answers: no owner after the bound": {
			deployment: "gpuhub-culler", objs: []runtime.Object{deployment("jhub", "gpuhub-culler", "uid-1")}, failures: 1 << 30,
			wantLog: "gave up after 200ms",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			kc := fake.NewClientset(tc.objs...)
			var gets atomic.Int64
			kc.PrependReactor("get", "deployments", func(k8stesting.Action) (bool, runtime.Object, error) {
				if gets.Add(1) <= tc.failures {
					return true, nil, unreachable
				}
				return false, nil, nil
			})
			var logs logtest.Buffer
			w := NewOwner(OwnerOptions{Client: kc, Namespace: "jhub", Deployment: tc.deployment,
				Logger: slog.New(slog.NewTextHandler(&logs, nil)), GiveUpAfter: 200 * time.Millisecond, Backoff: time.Millisecond})
			got := w.Ref(context.Background())
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Ref (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.want, w.Ref(context.Background())); diff != "" {
				t.Errorf("second Ref (-want +got):\n%s", diff)
			}
			if tc.failures < 1<<30 && gets.Load() != tc.wantGets {
				t.Errorf("Deployment read %d times, want %d", gets.Load(), tc.wantGets)
			}
			if !strings.Contains(logs.String(), tc.wantLog) {
				t.Errorf("log lacks %q:\n%s", tc.wantLog, logs.String())
			}
			if tc.wantLog == "running without an owner" && !strings.Contains(logs.String(), "jhub/gpuhub-culler") {
				t.Errorf("log does not name the Deployment:\n%s", logs.String())
			}
		})
	}
}

func TestOwnerRefCancelled(t *testing.T) {
	kc := fake.NewClientset(deployment("jhub", "gpuhub-quota", "uid-1"))
	var fail atomic.Bool
	fail.Store(true)
	kc.PrependReactor("get", "deployments", func(k8stesting.Action) (bool, runtime.Object, error) {
		if fail.Load() {
			return true, nil, errors.New("connection refused")
		}
		return false, nil, nil
	})
	w := NewOwner(OwnerOptions{Client: kc, Namespace: "jhub", Deployment: "gpuhub-quota", Backoff: time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if got := w.Ref(ctx); got != nil {
		t.Fatalf("Ref with a cancelled context = %v, want nil", got)
	}
	// The caller that stopped decided nothing: the next one reads the Deployment.
	fail.Store(false)
	if got := w.Ref(context.Background()); got == nil || got.UID != "uid-1" {
		t.Errorf("Ref after a cancelled one = %v, want the Deployment's", got)
	}
	if got := (*Owner)(nil).Ref(context.Background()); got != nil {
		t.Errorf("nil Owner's Ref = %v", got)
	}
}
