package app

import (
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestWaitlistStateSurvivesRestart: gpu-quota's waitlist state, written through the service wired as main does,
// is read back after a restart on the same ledger database.
func TestWaitlistStateSurvivesRestart(t *testing.T) {
	hub := newHub(t)
	hub.AddToken("quota-token", "gpu-quota")
	var busy atomic.Int64
	port := fakeAgent(t, &busy)
	db := filepath.Join(t.TempDir(), "ledger.db")
	services := func(o *Options) {
		o.WaitlistServices, o.ReaderServices = []string{"gpu-quota"}, []string{"gpu-quota"}
	}
	put := func(base, version, body string) int {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPut, base+"waitlist/state", strings.NewReader(body))
		req.Header.Set("Authorization", "token quota-token")
		req.Header.Set("If-Match", version)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	type state struct {
		Version int64
		State   map[string]any
	}

	r := start(t, hub, db, port, services)
	base := r.url + "/services/gpu-usage/api/v1/"
	eventually(t, "first write once the ledger is connected", func() (bool, string) {
		code := put(base, `"0"`, `{"state": {"queues": {"gpu H100-80GB-HBM3": ["bob", "alice"]}}}`)
		return code == http.StatusOK, http.StatusText(code)
	})
	if code := put(base, `"0"`, `{"state": {}}`); code != http.StatusPreconditionFailed {
		t.Errorf("a second first write: %d, want 412", code)
	}
	if code := getJSON(t, base+"gpu-hours/decayed?halfLife=7d", "quota-token", nil); code != http.StatusOK {
		t.Errorf("decayed GPU-hours for gpu-quota: %d, want 200", code)
	}
	if code := getJSON(t, base+"waitlist/state", "alice-token", nil); code != http.StatusForbidden {
		t.Errorf("alice reads the waitlist state: %d, want 403", code)
	}
	r.stop(t)

	r = start(t, hub, db, port, services)
	defer r.stop(t)
	base = r.url + "/services/gpu-usage/api/v1/"
	var got state
	eventually(t, "state read back after the restart", func() (bool, string) {
		got = state{}
		code := getJSON(t, base+"waitlist/state", "quota-token", &got)
		return code == http.StatusOK, http.StatusText(code)
	})
	want := state{Version: 1, State: map[string]any{"queues": map[string]any{"gpu H100-80GB-HBM3": []any{"bob", "alice"}}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("after restart (-want +got):\n%s", diff)
	}
}
