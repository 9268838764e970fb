package quotaclient

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuhub/gpuhub/services/internal/contract"
)

type fakeQuota struct {
	calls  atomic.Int64
	status int
	body   string
	delay  time.Duration
	got    atomic.Pointer[contract.AssessRequest]
	auth   atomic.Pointer[string]
}

func (f *fakeQuota) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.calls.Add(1)
	if r.URL.Path != "/services/gpu-quota/api/v1/assess" || r.Method != http.MethodPost {
		w.WriteHeader(http.StatusNotFound)
		return
	}
	a := r.Header.Get("Authorization")
	f.auth.Store(&a)
	var req contract.AssessRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest) // and nothing stored: the tests' checks of it fail
		return
	}
	f.got.Store(&req)
	if f.delay > 0 {
		select {
		case <-time.After(f.delay):
		case <-r.Context().Done():
		}
	}
	w.WriteHeader(f.status)
	_, _ = w.Write([]byte(f.body))
}

func TestAssess(t *testing.T) {
	opts := []contract.AssessOption{{ID: "gpu-h100-80gb-hbm3", Resources: map[string]int64{"nvidia.com/gpu": 1},
		NodeSelector: map[string]string{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}}, {ID: "shared-t4", Resources: map[string]int64{"nvidia.com/gpu.shared": 1}}}
	cases := map[string]struct {
		status           int
		body             string
		delay            time.Duration
		want             map[string]contract.Verdict
		wantErr          string
		wantUnavailable  string
		wantSecondCached bool
	}{
		"answers, then the cache": {status: 200, body: `{"options":[{"id":"gpu-h100-80gb-hbm3","allow":false,"reason":"max_gpus","message":"Too much.","heldForOthers":1},
			{"id":"shared-t4","allow":true,"heldForOthers":0,"heldForYouUntil":"2026-01-05T10:10:00Z"}],"onUnavailable":"closed"}`,
			want: map[string]contract.Verdict{"gpu-h100-80gb-hbm3": {ID: "gpu-h100-80gb-hbm3", Reason: "max_gpus", Message: "Too much.", HeldForOthers: 1},
				"shared-t4": {ID: "shared-t4", Allow: true, HeldForYouUntil: time.Date(2026, 1, 5, 10, 10, 0, 0, time.UTC)}},
			wantUnavailable: contract.Closed, wantSecondCached: true},
		"503: gpu-quota's error body says no setting, the default stays": {status: 503, body: `{"status":503,"message":"cannot decide"}`,
			wantErr: "503 Service Unavailable: cannot decide", wantUnavailable: contract.Open},
		"503 with the policy's mode: taken (a handover, before any answer)": {status: 503,
			body:    `{"status":503,"message":"no gpu-quota replica decides right now (a handover); try again","onUnavailable":"closed"}`,
			wantErr: "a handover", wantUnavailable: contract.Closed},
		"500 with a mode: not read":       {status: 500, body: `{"status":500,"message":"bug","onUnavailable":"closed"}`, wantErr: "bug", wantUnavailable: contract.Open},
		"503 without a word: the default": {status: 503, body: `{"message":"no"}`, wantErr: "no", wantUnavailable: contract.Open},
		"slow":                            {status: 200, body: `{"options":[]}`, delay: time.Second, wantErr: "context deadline exceeded", wantUnavailable: contract.Open},
		"not JSON":                        {status: 200, body: `<html>`, wantErr: "not an assessment", wantUnavailable: contract.Open},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := &fakeQuota{status: tc.status, body: tc.body, delay: tc.delay}
			srv := httptest.NewServer(f)
			defer srv.Close()
			now := time.Date(2026, 1, 5, 10, 0, 0, 0, time.UTC)
			c, err := New(Options{URL: srv.URL + "/services/gpu-quota/", Token: "profiles-token", Timeout: 100 * time.Millisecond,
				Now: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			got, res, err := c.Assess(context.Background(), "bob", "", []string{"students"}, opts)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
			} else if err != nil || res != "ok" {
				t.Fatalf("%v %v", res, err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("verdicts (-want +got):\n%s", diff)
			}
			if c.OnUnavailable() != tc.wantUnavailable {
				t.Errorf("onUnavailable %q, want %q", c.OnUnavailable(), tc.wantUnavailable)
			}
			if a := f.auth.Load(); a == nil || *a != "token profiles-token" {
				t.Errorf("authorization %v", a)
			}
			if req := f.got.Load(); req == nil || req.User != "bob" || len(req.Options) != 2 || req.Options[0].NodeSelector == nil {
				t.Errorf("request %+v", req)
			}
			if !tc.wantSecondCached {
				return
			}
			if _, res, _ := c.Assess(context.Background(), "bob", "", []string{"students"}, opts); res != "cached" || f.calls.Load() != 1 {
				t.Errorf("second ask: %s after %d calls", res, f.calls.Load())
			}
			if _, res, _ := c.Assess(context.Background(), "bob", "", []string{"researchers"}, opts); res != "ok" {
				t.Errorf("other groups: %s", res)
			}
			// A named server's form: gpu-quota is told which server, so that its own pods do not count.
			if _, res, _ := c.Assess(context.Background(), "bob", "lab", []string{"students"}, opts); res != "ok" {
				t.Errorf("named server: %s, want asked (not the default server's cached answer)", res)
			}
			if req := f.got.Load(); req == nil || req.Server != "lab" {
				t.Errorf("named server's request %+v, want server lab", req)
			}
			now = now.Add(3 * time.Second)
			if _, res, _ := c.Assess(context.Background(), "bob", "", []string{"students"}, opts); res != "ok" {
				t.Errorf("after the TTL: %s", res)
			}
		})
	}
}

func TestNewRefuses(t *testing.T) {
	if _, err := New(Options{}); err == nil {
		t.Error("no URL")
	}
	if _, err := New(Options{URL: "http://x/", OnUnavailable: "maybe"}); err == nil {
		t.Error("bad onUnavailable")
	}
}
