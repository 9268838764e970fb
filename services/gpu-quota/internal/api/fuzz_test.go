package api

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gpuhub/gpuhub/services/internal/contract"
)

// fuzzEndpoints are the requests the fuzzer writes the body or query of, each as a caller allowed to make it.
var fuzzEndpoints = []struct{ method, path, token string }{
	{http.MethodPost, "api/v1/admit", "quota-token"},
	{http.MethodPost, "api/v1/assess", "profiles-token"},
	{http.MethodPost, "api/v1/users/bob/waitlist", "bob-token"},
	{http.MethodDelete, "api/v1/users/bob/waitlist", "bob-token"},
	{http.MethodGet, "api/v1/explain", "alice-token"},
	{http.MethodGet, "api/v1/decisions", "usage-token"},
	{http.MethodGet, "api/v1/users/bob/quota", "bob-token"},
}

// FuzzRequest sends arbitrary bodies (admit, assess, waitlist join) and query strings (explain, leave,
// decisions) to gpu-quota's API: a 2xx with JSON or a 4xx with a message, never a 5xx (the engine answers); and
// what reaches the engine is what the API promises it: a user, no negative GPU count, every option named.
func FuzzRequest(f *testing.F) {
	srv, eng := newAPI(f)
	h := srv.Config.Handler
	for _, s := range []struct {
		ep    uint8
		query string
		body  string
	}{
		{0, "", `{"user":"bob","groups":["students"],"server":"","resources":{"nvidia.com/gpu":1},"nodeSelector":{"nvidia.com/gpu.product":"NVIDIA-H100-80GB-HBM3"}}`},
		{0, "", `{"user":" ","resources":{}}`},
		{0, "", `{"user":"bob","resources":{"nvidia.com/gpu":-1}}`},
		{0, "", `{"user":"bob","resources":{"nvidia.com/gpu":1e30}}`},
		{0, "", `{"user":"bob","waitlist":{"join":true,"autoStart":true}}`},
		{1, "", `{"user":"bob","groups":[],"options":[{"id":"cpu"},{"id":"gpu-h100","resources":{"nvidia.com/gpu":1}}]}`},
		{1, "", `{"user":"bob","options":[{"id":""}]}`},
		{1, "", `{"user":"bob","options":null}`},
		{2, "", `{"server":"gpu","resources":{"nvidia.com/mig-3g.20gb":1},"autoStart":true,"userOptions":{"profile":"mig"}}`},
		{2, "", `{"server":"gpu"}{"server":"x"}`},
		{3, "server=gpu", ""},
		{4, "user=bob&groups=students,,teachers", ""},
		{4, "groups=", ""},
		{5, "user=bob&limit=3", ""},
		{6, "", ""},
	} {
		f.Add(s.ep, s.query, []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, ep uint8, query string, body []byte) {
		e := fuzzEndpoints[int(ep)%len(fuzzEndpoints)]
		req := httptest.NewRequestWithContext(t.Context(), e.method, prefix+e.path, bytes.NewReader(body))
		req.URL.RawQuery = query
		req.Header.Set("Authorization", "token "+e.token)
		eng.mu.Lock()
		eng.admitted, eng.assessed, eng.joined, eng.left = nil, nil, nil, nil
		eng.mu.Unlock()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		switch code := rec.Code; {
		case code >= 200 && code < 300:
			if code != http.StatusNoContent && !json.Valid(rec.Body.Bytes()) {
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
		eng.mu.Lock()
		defer eng.mu.Unlock()
		for _, r := range append(eng.admitted, eng.joined...) {
			if strings.TrimSpace(r.User) == "" {
				t.Fatalf("a request without a user reached the engine: %+v", r)
			}
			for k, v := range r.Resources {
				if v < 0 {
					t.Fatalf("resources[%q] = %d reached the engine", k, v)
				}
			}
		}
		for _, r := range eng.joined {
			if r.User != "bob" {
				t.Fatalf("bob joined the waitlist as %q", r.User)
			}
		}
		for _, r := range eng.assessed {
			if strings.TrimSpace(r.User) == "" || len(r.Options) > maxOptions {
				t.Fatalf("assess request %+v reached the engine", r)
			}
			for _, o := range r.Options {
				if o.ID == "" {
					t.Fatalf("an option without an id reached the engine: %+v", r)
				}
			}
		}
	})
}
