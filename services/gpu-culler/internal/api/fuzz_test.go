package api

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gpuhub/gpuhub/services/internal/contract"
)

// fuzzCallers are the identities the fuzzer speaks as (identities in api_test.go).
var fuzzCallers = []string{"alice-token", "bob-token", "admin-token", "reader-token", "other-svc"}

// FuzzRequest sends arbitrary snooze bodies and query strings to gpu-culler's API as users, an admin and
// services: a 2xx with JSON or a 4xx with a message, never a 5xx; and a snooze that goes through acts on the
// caller's own servers unless the caller is an admin.
func FuzzRequest(f *testing.F) {
	fx := newFixture(f)
	for _, s := range []struct {
		ep, caller uint8
		query      string
		body       string
	}{
		{0, 0, "", `{"server":"big"}`},
		{0, 1, "", `{"server":"big","user":"alice"}`},
		{0, 2, "", `{"server":"","user":"alice"}`},
		{0, 0, "", `{"server":"big","extra":1}`},
		{0, 0, "", `{"server":"big"} {"server":"other"}`},
		{0, 3, "", `{"user":"alice"}`},
		{0, 0, "", `[]`},
		{1, 0, "user=bob", ""},
		{1, 2, "user=alice", ""},
		{1, 1, "user=%zz", ""},
		{2, 3, "user=alice&limit=5&since=2026-11-23T15:00:00Z", ""},
		{2, 0, "limit=-1", ""},
		{2, 2, "limit=99999999999999999999&action=stop", ""},
	} {
		f.Add(s.ep, s.caller, s.query, []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, ep, caller uint8, query string, body []byte) {
		token := fuzzCallers[int(caller)%len(fuzzCallers)]
		var req *http.Request
		switch ep % 3 {
		case 0:
			req = httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/services/gpu-culler/api/v1/snooze", bytes.NewReader(body))
		case 1:
			req = httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/services/gpu-culler/api/v1/me", nil)
		default:
			req = httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/services/gpu-culler/api/v1/decisions", nil)
		}
		req.URL.RawQuery = query
		req.Header.Set("Authorization", "token "+token)
		fx.snoozer.mu.Lock()
		fx.snoozer.calls = nil
		fx.snoozer.mu.Unlock()
		fx.logs.Reset() // the fixture's debug log would grow with every input
		rec := httptest.NewRecorder()
		fx.h.ServeHTTP(rec, req)
		switch code := rec.Code; {
		case code >= 200 && code < 300:
			if !json.Valid(rec.Body.Bytes()) {
				t.Fatalf("%s %s: %d with a body that is not JSON: %.200q", req.Method, req.URL, code, rec.Body.String())
			}
		case code >= 400 && code < 500:
			var e contract.Error
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Message == "" {
				t.Fatalf("%s %s: %d without an error message: %.200q", req.Method, req.URL, code, rec.Body.String())
			}
		default:
			t.Fatalf("%s %s: status %d: %.300q", req.Method, req.URL, code, rec.Body.String())
		}
		id := identities[token]
		fx.snoozer.mu.Lock()
		defer fx.snoozer.mu.Unlock()
		for _, c := range fx.snoozer.calls {
			if c.Actor != id.Name || (!id.Admin && c.User != id.Name) {
				t.Fatalf("%s snoozed %+v: only an admin acts for someone else", id.Name, c)
			}
		}
	})
}
