package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuhub/gpuhub/hubapi"
	"github.com/gpuhub/gpuhub/hubapi/hubapitest"
	"github.com/gpuhub/gpuhub/hubapi/hubauth"
	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/admit"
	"github.com/gpuhub/gpuhub/services/internal/decision"
	"github.com/gpuhub/gpuhub/services/internal/yield"
)

// stubEngine answers from fixed values and records what it was asked.
type stubEngine struct {
	mu       sync.Mutex
	admitted []admit.Request
	assessed []admit.AssessRequest
	joined   []admit.Request
	left     []string
	err      error
	// fg is the API's Foreground; busy is whether it was busy during each Admit.
	fg   *yield.Foreground
	busy []bool
}

func (s *stubEngine) Assess(_ context.Context, r admit.AssessRequest) (admit.Assessment, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return admit.Assessment{}, s.err
	}
	s.assessed = append(s.assessed, r)
	out := admit.Assessment{Options: []admit.Verdict{}, OnUnavailable: "closed"}
	for _, o := range r.Options {
		v := admit.Verdict{ID: o.ID, Allow: len(o.Resources) == 0, Reason: "no_gpu"}
		if !v.Allow {
			v.Reason, v.Message = "max_gpus", "You already use 1 GPU."
		}
		if o.ID == "gpu-h100" { // the waitlist holds one H100 for this server and one for someone else
			v.Allow, v.Reason, v.Message = true, "ok", ""
			v.HeldForOthers, v.HeldForYouUntil = 1, time.Date(2026, 11, 23, 14, 5, 0, 0, time.UTC)
		}
		out.Options = append(out.Options, v)
	}
	return out, nil
}

func (s *stubEngine) Admit(_ context.Context, r admit.Request) (admit.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return admit.Result{}, s.err
	}
	s.admitted = append(s.admitted, r)
	s.busy = append(s.busy, s.fg.Busy())
	return admit.Result{Allow: true, Reason: "ok", DecisionID: "d1", Reservation: "r1", CanTake: []admit.Option{}, OnUnavailable: "open"}, nil
}

func (s *stubEngine) UserQuota(name string) (admit.QuotaStatus, error) {
	if s.err != nil {
		return admit.QuotaStatus{}, s.err
	}
	return admit.QuotaStatus{User: name, Budgets: []admit.BudgetStatus{}}, nil
}

func (s *stubEngine) Explain(user string, groups []string) (admit.Explanation, error) {
	return admit.Explanation{User: user, Groups: groups, Text: "Quota policy for user " + user + "\n"}, nil
}

const prefix = "/services/gpu-quota/"

func newAPI(t testing.TB) (*httptest.Server, *stubEngine) {
	t.Helper()
	return newAPIWith(t, nil)
}

// newAPIWith is newAPI with its options changed by mod (nil: none).
func newAPIWith(t testing.TB, mod func(*Options)) (*httptest.Server, *stubEngine) {
	t.Helper()
	hub := hubapitest.New(t)
	hub.AddUser(hubapi.User{Name: "bob", Groups: []string{"students"}})
	hub.AddUser(hubapi.User{Name: "alice", Admin: true})
	hub.AddUser(hubapi.User{Name: "tina", Groups: []string{"teachers"}})
	hub.AddToken("bob-token", "bob")
	hub.AddToken("alice-token", "alice")
	hub.AddToken("tina-token", "tina")
	hub.AddToken("usage-token", "gpu-usage")
	hub.AddToken("profiles-token", "gpu-profiles")
	hub.AddToken("other-token", "gpu-culler")
	log, err := decision.NewLog(decision.Options{Service: "gpu-quota"})
	if err != nil {
		t.Fatal(err)
	}
	log.Record(decision.Record{User: "bob", Action: decision.ActionDeny, Reason: "max_servers"})
	eng := &stubEngine{fg: &yield.Foreground{}}
	o := Options{Prefix: prefix, Engine: eng, Log: log, Token: "quota-token", ReaderServices: []string{"gpu-usage", "gpu-profiles"}, Foreground: eng.fg,
		Auth: hubauth.New(hubauth.Options{Hub: hub.Client("quota-token"), AdminGroups: []string{"teachers"}}).Middleware}
	if mod != nil {
		mod(&o)
	}
	h, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, eng
}

func do(t *testing.T, method, url, token, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, url, strings.NewReader(body))
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
	defer func() { _ = resp.Body.Close() }()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil && !errors.Is(err, io.EOF) { // EOF: no body
		t.Fatalf("%s %s answer %d: %v", method, url, resp.StatusCode, err)
	}
	return resp.StatusCode, out
}

func TestAuth(t *testing.T) {
	srv, _ := newAPI(t)
	admitBody := `{"user":"bob","resources":{"nvidia.com/gpu":1}}`
	assessBody := `{"user":"bob","options":[{"id":"cpu"}]}`
	tests := []struct {
		method, path, token, body string
		want                      int
	}{
		{"POST", "api/v1/admit", "quota-token", admitBody, 200},
		{"POST", "api/v1/admit", "", admitBody, 401},
		{"POST", "api/v1/admit", "bob-token", admitBody, 401},   // a user's token is not gpu-quota's
		{"POST", "api/v1/admit", "alice-token", admitBody, 401}, // nor an admin's
		{"GET", "api/v1/users/bob/quota", "bob-token", "", 200},
		{"GET", "api/v1/users/alice/quota", "bob-token", "", 403},
		{"GET", "api/v1/users/bob/quota", "alice-token", "", 200},
		{"GET", "api/v1/users/bob/quota", "tina-token", "", 200},  // --admin-groups
		{"GET", "api/v1/users/bob/quota", "usage-token", "", 200}, // --reader-services
		{"GET", "api/v1/users/bob/quota", "other-token", "", 403},
		{"GET", "api/v1/users/bob/quota", "", "", 401},
		{"GET", "api/v1/users/bob/quota", "quota-token-wrong", "", 401},
		{"GET", "api/v1/decisions", "alice-token", "", 200},
		{"GET", "api/v1/decisions", "usage-token", "", 200},
		{"GET", "api/v1/decisions", "bob-token", "", 403},
		{"POST", "api/v1/assess", "profiles-token", assessBody, 200}, // --reader-services
		{"POST", "api/v1/assess", "usage-token", assessBody, 200},
		{"POST", "api/v1/assess", "alice-token", assessBody, 200},
		{"POST", "api/v1/assess", "tina-token", assessBody, 200},
		{"POST", "api/v1/assess", "bob-token", assessBody, 403}, // a user may not ask about anyone
		{"POST", "api/v1/assess", "other-token", assessBody, 403},
		{"POST", "api/v1/assess", "quota-token", assessBody, 401}, // gpu-quota's own token is for admit only
		{"POST", "api/v1/assess", "", assessBody, 401},
		{"GET", "api/v1/assess", "profiles-token", "", 404},
		{"GET", "api/v1/explain?user=bob", "alice-token", "", 200},
		{"GET", "api/v1/explain?user=bob", "usage-token", "", 403},
		{"GET", "api/v1/explain?user=bob", "bob-token", "", 403},
		{"GET", "api/v1/nothing", "", "", 404},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s %s as %s", tc.method, tc.path, tc.token), func(t *testing.T) {
			if code, body := do(t, tc.method, srv.URL+prefix+tc.path, tc.token, tc.body); code != tc.want {
				t.Errorf("status %d, want %d: %v", code, tc.want, body)
			}
		})
	}
}

func TestAdmitBody(t *testing.T) {
	srv, eng := newAPI(t)
	code, body := do(t, "POST", srv.URL+prefix+"api/v1/admit", "quota-token",
		`{"user":"bob","server":"gpu","groups":["students"],"resources":{"nvidia.com/gpu.shared":1},
		  "nodeSelector":{"nvidia.com/gpu.product":"Tesla-T4-SHARED"},"profile":"t4-share","future":"ignored"}`)
	if code != 200 {
		t.Fatalf("status %d: %v", code, body)
	}
	want := map[string]any{"allow": true, "reason": "ok", "message": "", "decisionId": "d1", "reservation": "r1", "canTake": []any{}, "onUnavailable": "open"}
	if diff := cmp.Diff(want, body); diff != "" {
		t.Errorf("answer (-want +got):\n%s", diff)
	}
	wantReq := admit.Request{User: "bob", Server: "gpu", Groups: []string{"students"}, Resources: map[string]int64{"nvidia.com/gpu.shared": 1},
		NodeSelector: map[string]string{"nvidia.com/gpu.product": "Tesla-T4-SHARED"}, Profile: "t4-share"}
	got := slices.Clone(eng.admitted)
	for i := range got {
		if got[i].Arrived.IsZero() {
			t.Errorf("request %d: no arrival time (a refusal would release a later start's reservation)", i)
		}
		got[i].Arrived = time.Time{}
	}
	if diff := cmp.Diff([]admit.Request{wantReq}, got); diff != "" {
		t.Errorf("request (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]bool{true}, eng.busy); diff != "" {
		t.Errorf("foreground busy during the admission (background passes wait) (-want +got):\n%s", diff)
	}

	// The glue sends the pod: gpu-quota counts its GPUs and takes its node selector.
	eng.admitted = nil
	if code, body := do(t, "POST", srv.URL+prefix+"api/v1/admit", "quota-token", gluePod); code != 200 {
		t.Fatalf("the glue's pod: status %d: %v", code, body)
	}
	if code, body := do(t, "POST", srv.URL+prefix+"api/v1/admit", "quota-token", gluePod); body["countedPod"] != true {
		t.Errorf("the answer to the glue's pod does not say it was counted (%d): %v", code, body)
	}
	if len(eng.admitted) != 2 || eng.admitted[0].Resources["nvidia.com/mig-3g.20gb"] != 2 ||
		eng.admitted[0].NodeSelector["nvidia.com/gpu.product"] != "NVIDIA-A100-SXM4-40GB" {
		t.Errorf("the glue's pod reached the engine as %+v", eng.admitted)
	}

	// The spawn's user_options ask to join: gpu-quota reads the choice from them.
	eng.admitted = nil
	if code, body := do(t, "POST", srv.URL+prefix+"api/v1/admit", "quota-token",
		`{"user":"bob","resources":{"nvidia.com/gpu":1},"userOptions":{"profile":"h100","gpuhub_waitlist":"1"}}`); code != 200 {
		t.Fatalf("a join: status %d: %v", code, body)
	}
	if len(eng.admitted) != 1 || eng.admitted[0].Waitlist == nil || !eng.admitted[0].Waitlist.Join || eng.admitted[0].Waitlist.AutoStart {
		t.Errorf("a join from user_options reached the engine as %+v", eng.admitted)
	}

	for name, bad := range map[string]string{
		"not JSON":           `user=bob`,
		"no user":            `{"resources":{"nvidia.com/gpu":1}}`,
		"pod and resources":  `{"user":"bob","pod":{},"resources":{"nvidia.com/gpu":1}}`,
		"a bad quantity":     `{"user":"bob","pod":{"containers":[{"name":"n","resources":{"limits":{"nvidia.com/gpu":"one"}}}]}}`,
		"negative resources": `{"user":"bob","resources":{"nvidia.com/gpu":-1}}`,
		"wrong type":         `{"user":"bob","resources":{"nvidia.com/gpu":"one"}}`,
		"too big":            `{"user":"bob","profile":"` + strings.Repeat("x", maxBody) + `"}`,
	} {
		if code, body := do(t, "POST", srv.URL+prefix+"api/v1/admit", "quota-token", bad); code != 400 || body["message"] == "" {
			t.Errorf("%s: status %d %v, want 400 with a message", name, code, body)
		}
	}

	eng.err = fmt.Errorf("%w: informer caches not synced yet", admit.ErrUnavailable)
	code, body = do(t, "POST", srv.URL+prefix+"api/v1/admit", "quota-token", `{"user":"bob"}`)
	if code != 503 || !strings.Contains(body["message"].(string), "not synced") || body["onUnavailable"] != "closed" {
		t.Errorf("engine unavailable: %d %v, want 503 with the reason and the policy's onUnavailable", code, body)
	}
}

func TestAssessBody(t *testing.T) {
	srv, eng := newAPI(t)
	url := srv.URL + prefix + "api/v1/assess"
	code, body := do(t, "POST", url, "profiles-token",
		`{"user":"bob","server":"gpu","groups":["students"],"future":"ignored","options":[
		  {"id":"cpu"},
		  {"id":"shared-t4","resources":{"nvidia.com/gpu.shared":1},"nodeSelector":{"nvidia.com/gpu.product":"Tesla-T4-SHARED"}},
		  {"id":"gpu-h100","resources":{"nvidia.com/gpu":1}}]}`)
	if code != 200 {
		t.Fatalf("status %d: %v", code, body)
	}
	want := map[string]any{"onUnavailable": "closed", "options": []any{
		map[string]any{"id": "cpu", "allow": true, "reason": "no_gpu", "message": "", "heldForOthers": 0.0},
		map[string]any{"id": "shared-t4", "allow": false, "reason": "max_gpus", "message": "You already use 1 GPU.", "heldForOthers": 0.0},
		map[string]any{"id": "gpu-h100", "allow": true, "reason": "ok", "message": "", "heldForOthers": 1.0,
			"heldForYouUntil": "2026-11-23T14:05:00Z"},
	}}
	if diff := cmp.Diff(want, body); diff != "" {
		t.Errorf("answer (-want +got):\n%s", diff)
	}
	wantReq := admit.AssessRequest{User: "bob", Server: "gpu", Groups: []string{"students"}, Options: []admit.AssessOption{
		{ID: "cpu"},
		{ID: "shared-t4", Resources: map[string]int64{"nvidia.com/gpu.shared": 1}, NodeSelector: map[string]string{"nvidia.com/gpu.product": "Tesla-T4-SHARED"}},
		{ID: "gpu-h100", Resources: map[string]int64{"nvidia.com/gpu": 1}},
	}}
	if diff := cmp.Diff([]admit.AssessRequest{wantReq}, eng.assessed); diff != "" {
		t.Errorf("request (-want +got):\n%s", diff)
	}
	if code, body := do(t, "POST", url, "profiles-token", `{"user":"bob","options":[]}`); code != 200 || fmt.Sprint(body["options"]) != "[]" {
		t.Errorf("no options: %d %v, want 200 with options []", code, body)
	}

	many := `{"user":"bob","options":[` + strings.TrimSuffix(strings.Repeat(`{"id":"x"},`, maxOptions+1), ",") + `]}`
	for name, bad := range map[string]string{
		"not JSON":                `user=bob`,
		"no user":                 `{"options":[{"id":"cpu"}]}`,
		"an option without an id": `{"user":"bob","options":[{"resources":{"nvidia.com/gpu":1}}]}`,
		"negative resources":      `{"user":"bob","options":[{"id":"h","resources":{"nvidia.com/gpu":-1}}]}`,
		"wrong type":              `{"user":"bob","options":{"id":"cpu"}}`,
		"too many options":        many,
		"too big":                 `{"user":"bob","server":"` + strings.Repeat("x", maxAssessBody) + `"}`,
	} {
		if code, body := do(t, "POST", url, "profiles-token", bad); code != 400 || body["message"] == "" {
			t.Errorf("%s: status %d %v, want 400 with a message", name, code, body)
		}
	}

	eng.err = fmt.Errorf("%w: informer caches not synced yet", admit.ErrUnavailable)
	code, body = do(t, "POST", url, "profiles-token", `{"user":"bob","options":[{"id":"cpu"}]}`)
	if code != 503 || !strings.Contains(body["message"].(string), "not synced") {
		t.Errorf("engine unavailable: %d %v, want 503 with the reason", code, body)
	}
}

func TestReadEndpoints(t *testing.T) {
	srv, _ := newAPI(t)
	_, body := do(t, "GET", srv.URL+prefix+"api/v1/decisions?user=bob", "usage-token", "")
	if ds, _ := body["decisions"].([]any); len(ds) != 1 || ds[0].(map[string]any)["reason"] != "max_servers" {
		t.Errorf("decisions %v", body)
	}
	code, body := do(t, "GET", srv.URL+prefix+"api/v1/decisions?limit=nope", "alice-token", "")
	if code != 400 {
		t.Errorf("bad limit: %d %v", code, body)
	}
	_, body = do(t, "GET", srv.URL+prefix+"api/v1/explain?user=bob&groups=researchers,ta", "alice-token", "")
	if diff := cmp.Diff([]any{"researchers", "ta"}, body["groups"]); diff != "" {
		t.Errorf("explain groups (-want +got):\n%s", diff)
	}
	if code, _ := do(t, "GET", srv.URL+prefix+"api/v1/explain", "alice-token", ""); code != 400 {
		t.Errorf("explain without user: %d", code)
	}
}
