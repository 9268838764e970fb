package api

import (
	"errors"
	"math"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestDecayedGPUHours (contract W2): decayed GPU-hours for gpu-quota's fair share, for the readers of gpu-hours
// only (see testLedger: alice holds 0.5 an hour from 20:00 yesterday, 0.25 in the half hour so far; now is
// 10:30).
func TestDecayedGPUHours(t *testing.T) {
	srv, led := testServerWithLedger(t)
	class := aliceMIG.Class
	// The hours at 09:00, 08:00, ... have midpoints 1, 2, ... hours before 10:30; the current one 15 min.
	hours := func(n int, halfLife float64) float64 {
		v := 0.0
		for k := 1; k <= n; k++ {
			v += 0.5 * math.Exp2(-float64(k)/halfLife)
		}
		return v + 0.25*math.Exp2(-0.25/halfLife)
	}
	for name, tc := range map[string]struct {
		query string
		want  map[string]any
	}{
		"default horizon 8 half-lives": {"halfLife=1h", map[string]any{"asOf": "2026-11-22T10:30:00Z", "halfLife": "1h", "horizon": "8h",
			"users": map[string]any{"alice": map[string]any{class: hours(8, 1)}}}},
		"a horizon that reaches every hour": {"halfLife=2h&horizon=1d", map[string]any{"asOf": "2026-11-22T10:30:00Z", "halfLife": "2h", "horizon": "1d",
			"users": map[string]any{"alice": map[string]any{class: hours(14, 2)}}}},
		"half-life in hours, written back in days": {"halfLife=168h", map[string]any{"asOf": "2026-11-22T10:30:00Z", "halfLife": "7d", "horizon": "56d",
			"users": map[string]any{"alice": map[string]any{class: hours(14, 168)}}}},
		"the horizon capped at 366d": {"halfLife=90d", map[string]any{"asOf": "2026-11-22T10:30:00Z", "halfLife": "90d", "horizon": "366d",
			"users": map[string]any{"alice": map[string]any{class: hours(14, 90*24)}}}},
	} {
		t.Run(name, func(t *testing.T) {
			status, got := get(t, srv, "GET", prefix+"api/v1/gpu-hours/decayed?"+tc.query, "quota-token")
			if diff := cmp.Diff(tc.want, got, approx); status != http.StatusOK || diff != "" {
				t.Errorf("%d (-want +got):\n%s", status, diff)
			}
		})
	}
	for name, tc := range map[string]struct {
		query, token string
		status       int
		message      string
	}{
		"admin":                  {"halfLife=7d", "root-token", http.StatusOK, ""},
		"a user":                 {"halfLife=7d", "alice-token", http.StatusForbidden, "--reader-services"},
		"another service":        {"halfLife=7d", "culler-token", http.StatusForbidden, "--reader-services"},
		"no token":               {"halfLife=7d", "", http.StatusUnauthorized, ""},
		"no half-life":           {"", "quota-token", http.StatusBadRequest, "halfLife is required"},
		"not a duration":         {"halfLife=week", "quota-token", http.StatusBadRequest, `halfLife "week"`},
		"not whole hours":        {"halfLife=90m", "quota-token", http.StatusBadRequest, "whole hours from 1h to 90d"},
		"half-life too long":     {"halfLife=91d", "quota-token", http.StatusBadRequest, "whole hours from 1h to 90d"},
		"horizon not a duration": {"halfLife=7d&horizon=x", "quota-token", http.StatusBadRequest, `horizon "x"`},
		"horizon empty":          {"halfLife=7d&horizon=", "quota-token", http.StatusBadRequest, `horizon ""`},
		"horizon too long":       {"halfLife=7d&horizon=367d", "quota-token", http.StatusBadRequest, "whole hours from 1h to 366d"},
		"horizon too short":      {"halfLife=7d&horizon=30m", "quota-token", http.StatusBadRequest, "whole hours from 1h to 366d"},
	} {
		t.Run(name, func(t *testing.T) {
			status, body := get(t, srv, "GET", prefix+"api/v1/gpu-hours/decayed?"+tc.query, tc.token)
			if msg, _ := body["message"].(string); status != tc.status || !strings.Contains(msg, tc.message) {
				t.Errorf("%d %q, want %d with %q", status, msg, tc.status, tc.message)
			}
		})
	}
	down := errors.New("the ledger database cannot be reached (retrying every 30 s)")
	led.down.Store(&down)
	resp := do(t, srv, prefix+"api/v1/gpu-hours/decayed?halfLife=7d", "quota-token")
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("ledger down: %d, Retry-After %q; want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}
