package api

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/admit"
)

func (s *stubEngine) Places(user string) ([]admit.Place, error) {
	if s.err != nil {
		return nil, s.err
	}
	return []admit.Place{{User: "bob", Class: "gpu H100-80GB-HBM3", Position: 1, Waiting: 1}}, nil
}

func (s *stubEngine) Contended() ([]admit.Contention, error) {
	return []admit.Contention{{Class: "gpu H100-80GB-HBM3", Kind: "gpu", Waiting: 1}}, nil
}

func (s *stubEngine) Join(r admit.Request) (admit.Place, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.joined = append(s.joined, r)
	if s.err != nil {
		return admit.Place{}, s.err
	}
	return admit.Place{User: r.User, Server: r.Server, Position: 1, Waiting: 1}, nil
}

func (s *stubEngine) OnUnavailable() string { return "closed" }

func (s *stubEngine) Leave(user, server string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.left = append(s.left, user+"/"+server)
	return s.err
}

func TestWaitlistAccess(t *testing.T) {
	srv, eng := newAPI(t)
	base := srv.URL + prefix + "api/v1/"
	join := `{"server": "", "resources": {"nvidia.com/gpu": 1}, "autoStart": true, "userOptions": {"profile": "h100"}}`
	for _, tc := range []struct {
		method, path, token, body string
		want                      int
	}{
		{"GET", "waitlist", "alice-token", "", 200},
		{"GET", "waitlist", "usage-token", "", 200},
		{"GET", "waitlist", "bob-token", "", 403},
		{"GET", "waitlist/contended", "profiles-token", "", 200},
		{"GET", "waitlist/contended", "other-token", "", 403}, // gpu-culler is not a reader service in this test
		{"GET", "users/bob/waitlist", "bob-token", "", 200},
		{"GET", "users/bob/waitlist", "alice-token", "", 200},
		{"GET", "users/alice/waitlist", "bob-token", "", 403},
		{"POST", "users/bob/waitlist", "bob-token", join, 200},
		{"POST", "users/bob/waitlist", "alice-token", join, 200}, // a Hub admin, for bob
		{"POST", "users/alice/waitlist", "bob-token", join, 403},
		{"POST", "users/bob/waitlist", "usage-token", join, 403}, // reading is not acting
		{"GET", "users/bob/waitlist", "tina-token", "", 200},     // --admin-groups read every user's places...
		{"POST", "users/bob/waitlist", "tina-token", join, 403},  // ...and act only for themselves
		{"DELETE", "users/bob/waitlist", "tina-token", "", 403},
		{"POST", "users/bob/waitlist", "bob-token", "{", 400},
		{"DELETE", "users/bob/waitlist?server=big", "bob-token", "", 204},
		{"DELETE", "users/bob/waitlist", "alice-token", "", 204},
		{"DELETE", "users/alice/waitlist", "bob-token", "", 403},
		{"GET", "waitlist", "", "", 401},
	} {
		if got, body := do(t, tc.method, base+tc.path, tc.token, tc.body); got != tc.want {
			t.Errorf("%s %s as %q = %d, want %d (%v)", tc.method, tc.path, tc.token, got, tc.want, body)
		}
	}
	eng.mu.Lock()
	defer eng.mu.Unlock()
	if len(eng.joined) != 2 {
		t.Fatalf("joined: %+v", eng.joined)
	}
	got := eng.joined[0]
	want := admit.Request{User: "bob", Resources: map[string]int64{"nvidia.com/gpu": 1}, Groups: []string{"students"},
		UserOptions: map[string]any{"profile": "h100"}, Waitlist: &admit.WaitlistChoice{Join: true, AutoStart: true}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("join request (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"bob/big", "bob/"}, eng.left); diff != "" {
		t.Errorf("left (-want +got):\n%s", diff)
	}
}

func TestWaitlistErrors(t *testing.T) {
	srv, eng := newAPI(t)
	base := srv.URL + prefix + "api/v1/"
	for _, tc := range []struct {
		err  error
		want int
	}{
		{&admit.JoinError{Message: "You cannot join the waitlist for this: budget spent"}, http.StatusConflict},
		{admit.ErrNotQueued, http.StatusNotFound},
		{admit.ErrWaitlistOff, http.StatusNotFound},
		{admit.ErrWaitlistNotReady, http.StatusServiceUnavailable},
	} {
		eng.mu.Lock()
		eng.err = tc.err
		eng.mu.Unlock()
		if got, body := do(t, "POST", base+"users/bob/waitlist", "bob-token", `{"resources": {"nvidia.com/gpu": 1}}`); got != tc.want {
			t.Errorf("%v: %d, want %d (%v)", tc.err, got, tc.want, body)
		}
	}
}

// TestWaitlistJoinUserOptionsBound: a join whose userOptions are over what the waitlist keeps with an entry is
// refused with a 400 that says so, before the engine is asked; small ones pass through.
func TestWaitlistJoinUserOptionsBound(t *testing.T) {
	srv, eng := newAPI(t)
	url := srv.URL + prefix + "api/v1/users/bob/waitlist"
	big := `{"resources": {"nvidia.com/gpu": 1}, "userOptions": {"profile": "h100", "pad": "` + strings.Repeat("x", 9<<10) + `"}}`
	got, body := do(t, "POST", url, "bob-token", big)
	if got != http.StatusBadRequest || !strings.Contains(fmt.Sprint(body["message"]), "more than the waitlist keeps with a server (8 KiB)") {
		t.Errorf("9 KiB of userOptions: %d %v, want 400 saying so", got, body)
	}
	if got, body := do(t, "POST", url, "bob-token", `{"resources": {"nvidia.com/gpu": 1}, "userOptions": {"profile": "h100"}}`); got != http.StatusOK {
		t.Errorf("small userOptions: %d %v", got, body)
	}
	eng.mu.Lock()
	defer eng.mu.Unlock()
	if len(eng.joined) != 1 {
		t.Errorf("the engine was asked %d times, want once (the small join)", len(eng.joined))
	}
}
