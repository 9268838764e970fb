package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuhub/gpuhub/services/internal/notice"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/usage"
)

// aliceNotice is gpu-quota's notice on alice's pod in the test view.
var aliceNotice = usage.Notice{Server: "", Notice: notice.Notice{Service: "gpu-quota", Kind: notice.KindBudget, Reason: "budget_exhausted",
	Message:  "You are over your 24-hour GPU budget (2 of 2 GPU-hours used): your default GPU server stops at 10:40 UTC unless you stop it first.",
	Deadline: now.Add(10 * time.Minute), CreatedAt: now}}

const aliceQuota = `{"user":"alice","exempt":false,"concurrent":{"maxGPUs":0.4286,"heldGPUs":0.4286,"maxServers":1,"servers":1},` +
	`"budgets":[{"window":"24h","windowSeconds":86400,"gpuHours":2,"usedGPUHours":2,"remainingGPUHours":0,"status":"ok"}],"notice":null}`

// fakeBudget plays budget.Client: alice's quota; bob's cannot be fetched.
type fakeBudget struct{}

func (fakeBudget) Get(_ context.Context, user string) json.RawMessage {
	if user == "alice" {
		return json.RawMessage(aliceQuota)
	}
	return json.RawMessage(`{"status":"unavailable","reason":"the quota service cannot be reached"}`)
}

// TestMeNoticesAndBudget (contract 5): notices from the user's pods, budget from gpu-quota as it answers.
func TestMeNoticesAndBudget(t *testing.T) {
	srv := testServer(t)
	_, me := get(t, srv, "GET", prefix+"api/v1/me", "alice-token")
	want := []any{map[string]any{"service": "gpu-quota", "kind": "budget", "reason": "budget_exhausted", "message": aliceNotice.Message,
		"deadline": "2026-11-22T10:40:00Z", "snoozable": false, "createdAt": "2026-11-22T10:30:00Z", "server": ""}}
	if diff := cmp.Diff(want, me["notices"]); diff != "" {
		t.Errorf("notices (-want +got):\n%s", diff)
	}
	var wantBudget map[string]any
	if err := json.Unmarshal([]byte(aliceQuota), &wantBudget); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wantBudget, me["budget"]); diff != "" {
		t.Errorf("budget (-want +got):\n%s", diff)
	}
	_, admin := get(t, srv, "GET", prefix+"api/v1/users/alice", "root-token")
	if diff := cmp.Diff(want, admin["notices"]); diff != "" {
		t.Errorf("users/alice notices (-want +got):\n%s", diff)
	}
	_, bob := get(t, srv, "GET", prefix+"api/v1/me", "bob-token")
	if diff := cmp.Diff([]any{}, bob["notices"]); diff != "" {
		t.Errorf("bob's notices (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]any{"status": "unavailable", "reason": "the quota service cannot be reached"}, bob["budget"]); diff != "" {
		t.Errorf("bob's budget (-want +got):\n%s", diff)
	}
	// No quota service configured: budget is null.
	_, noQuota := get(t, serveView(t, &usage.View{SampledAt: now}), "GET", prefix+"api/v1/me", "alice-token")
	if b, ok := noQuota["budget"]; !ok || b != nil {
		t.Errorf("budget without a quota service: %v (present %v), want null", b, ok)
	}
}

// TestRollingGPUHours: every user's GPU-hours by class in rolling windows, for admins and reader services
// only; the first hour bucket prorated (see testLedger: alice holds 0.5 an hour, 0.25 in the half hour so far).
func TestRollingGPUHours(t *testing.T) {
	srv, led := testServerWithLedger(t)
	status, got := get(t, srv, "GET", prefix+"api/v1/gpu-hours?windows=1h,24h,2h,24h", "quota-token")
	if status != http.StatusOK {
		t.Fatalf("status %d: %v", status, got)
	}
	class := aliceMIG.Class
	want := map[string]any{
		"asOf": "2026-11-22T10:30:00Z",
		"windows": map[string]any{
			// [09:30, 10:30]: half of the 09:00 bucket and the current one.
			"1h": map[string]any{"alice": map[string]any{class: 0.25 + 0.25}},
			// [08:30, 10:30]
			"2h": map[string]any{"alice": map[string]any{class: 0.25 + 0.5 + 0.25}},
			// [10:30 yesterday, 10:30]: everything (from 20:00 yesterday).
			"24h": map[string]any{"alice": map[string]any{class: 7.25}},
		},
	}
	if diff := cmp.Diff(want, got, approx); diff != "" {
		t.Errorf("gpu-hours (-want +got):\n%s", diff)
	}
	if status, body := get(t, srv, "GET", prefix+"api/v1/gpu-hours?windows=24h", "root-token"); status != http.StatusOK {
		t.Errorf("admin: %d %v", status, body)
	}
	for name, tc := range map[string]struct {
		query, token string
		status       int
		message      string
	}{
		"a user":          {"windows=24h", "alice-token", http.StatusForbidden, "--reader-services"},
		"another service": {"windows=24h", "culler-token", http.StatusForbidden, "--reader-services"},
		"no windows":      {"", "quota-token", http.StatusBadRequest, "windows is required"},
		"not a duration":  {"windows=24h,week", "quota-token", http.StatusBadRequest, `window "week"`},
		"not whole hours": {"windows=90m", "quota-token", http.StatusBadRequest, "whole hours"},
		"too long":        {"windows=400d", "quota-token", http.StatusBadRequest, "366d"},
		"too many":        {"windows=" + strings.Repeat("1h,", 16) + strings.Join([]string{"2h", "3h", "4h", "5h", "6h", "7h", "8h", "9h", "10h", "11h", "12h", "13h", "14h", "15h", "16h", "17h", "18h"}, ","), "quota-token", http.StatusBadRequest, "at most 16"},
	} {
		t.Run(name, func(t *testing.T) {
			status, body := get(t, srv, "GET", prefix+"api/v1/gpu-hours?"+tc.query, tc.token)
			if msg, _ := body["message"].(string); status != tc.status || !strings.Contains(msg, tc.message) {
				t.Errorf("%d %q, want %d with %q", status, msg, tc.status, tc.message)
			}
		})
	}
	down := errors.New("the ledger database cannot be reached (retrying every 30 s)")
	led.down.Store(&down)
	resp := do(t, srv, prefix+"api/v1/gpu-hours?windows=24h", "quota-token")
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("ledger down: %d, Retry-After %q; want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}
