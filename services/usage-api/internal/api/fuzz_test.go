package api

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuhub/gpuhub/services/internal/contract"
)

// fuzzEndpoints are the GET endpoints whose query the fuzzer writes, each with a token allowed to read it.
var fuzzEndpoints = []struct{ path, token string }{
	{"api/v1/users/alice", "root-token"},
	{"api/v1/me", "alice-token"},
	{"api/v1/users", "root-token"},
	{"api/v1/gpu-hours", "quota-token"},
	{"api/v1/gpu-hours/decayed", "quota-token"},
	{"api/v1/servers", "quota-token"},
	{"api/v1/cluster", "bob-token"},
}

// fuzzDo serves one request in-process and checks what every answer must be: a 2xx with a JSON body, or a 4xx
// with the service's error object and a message. Never a 5xx: the ledger is up, so nothing but the request
// is to blame.
func fuzzDo(t *testing.T, h http.Handler, req *http.Request) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	switch code := rec.Code; {
	case code >= 200 && code < 300:
		if !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("%s %s: %d with a body that is not JSON: %.200q", req.Method, req.URL, code, rec.Body.String())
		}
	case code >= 400 && code < 500:
		var e contract.Error
		if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Status != code || e.Message == "" {
			t.Fatalf("%s %s: %d without an error message: %.200q", req.Method, req.URL, code, rec.Body.String())
		}
	default:
		t.Fatalf("%s %s: status %d, want 2xx or 4xx: %.300q", req.Method, req.URL, code, rec.Body.String())
	}
	return rec
}

// FuzzQuery sends arbitrary query strings (tz, from, to, since, history, offset, limit, windows, halfLife,
// horizon, ...) to the read endpoints: a 200 or a 4xx that says what is wrong, never a 5xx; a custom window
// that is accepted is whole UTC hours, from <= to <= now.
func FuzzQuery(f *testing.F) {
	srv, _ := testServerWithLedger(f)
	h := srv.Config.Handler
	for _, s := range []struct {
		ep    uint8
		query string
	}{
		{0, "from=2026-11-22T00:00:00Z&to=2026-11-22T06:30:00Z&tz=Europe/Berlin"},
		{0, "from=2026-11-23T00:00:00Z&tz=Asia/Kolkata&history=false"},
		{0, "to=0001-01-01T00:00:00Z"},
		{0, "from=9999-12-31T23:59:59Z&to=9999-12-31T23:59:60Z"},
		{0, "tz=Local"},
		{0, "tz=../../etc/passwd"},
		{1, "since=2026-11-22T10:00:00.5Z&tz=America/St_Johns"},
		{1, "from=2026-11-22T10:00:00%2B14:00"},
		{2, "offset=999999999&limit=2147483647"},
		{2, "offset=-1"},
		{3, "windows=24h,7d,24h,30d"},
		{3, "windows=1.5h"},
		{3, "windows=9223372036854775807h"},
		{4, "halfLife=7d&horizon=366d"},
		{4, "halfLife=90d"},
		{5, ""},
		{6, "x=%zz"},
	} {
		f.Add(s.ep, s.query)
	}
	f.Fuzz(func(t *testing.T, ep uint8, query string) {
		e := fuzzEndpoints[int(ep)%len(fuzzEndpoints)]
		req := httptest.NewRequestWithContext(t.Context(), http.MethodGet, prefix+e.path, nil)
		req.URL.RawQuery = query
		req.Header.Set("Authorization", "token "+e.token)
		rec := fuzzDo(t, h, req)
		if rec.Code != http.StatusOK || !strings.HasPrefix(e.path, "api/v1/users/") {
			return
		}
		var resp struct {
			GPUHours map[string]*contract.Window `json:"gpuHours"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
			t.Fatal(err)
		}
		c := resp.GPUHours["custom"]
		if c == nil {
			return
		}
		// A window that starts after now is empty (from = to): nothing is recorded yet.
		if c.From == nil || c.To == nil || !c.From.Truncate(time.Hour).Equal(*c.From) ||
			(!c.From.Equal(*c.To) && (!c.From.Before(*c.To) || c.To.After(now))) {
			t.Fatalf("?%s: custom window %v .. %v, want whole hours, empty or from < to <= %v", query, c.From, c.To, now)
		}
		if c.Allocated < 0 || c.Used < 0 || c.UsedUnknown < 0 {
			t.Fatalf("?%s: negative GPU-hours %+v", query, c)
		}
	})
}

// FuzzWaitlistState writes arbitrary bodies and If-Match headers to the waitlist state gpu-quota stores here:
// a write is accepted only with the stored version and a {"state": {...}} body, and then a read gives back the
// same state (as JSON, not as bytes) at the next version; anything else is a 4xx with a message.
func FuzzWaitlistState(f *testing.F) {
	srv, _ := testServerWithLedger(f)
	h := srv.Config.Handler
	for _, s := range []struct{ ifMatch, body string }{
		{"current", `{"state":{"queues":{"mig":[{"user":"alice","since":"2026-11-22T10:00:00Z"}]},"held":{}}}`},
		{"current", `{"state": {"a": [1, 2.5e3, "\u00e9", null, true]} }`},
		{"current", `{"state":{}} {"state":{}}`},
		{"current", `{"state":[]}`},
		{"current", `{"state":{"a":1},"extra":1}`},
		{"current", `{"state":{"a":"\xff"}}`},
		{`"0"`, `{"state":{}}`},
		{`"99"`, `{"state":{}}`},
		{`W/"1"`, `{"state":{}}`},
		{`""`, `{"state":{}}`},
		{"", `{"state":{}}`},
	} {
		f.Add(s.ifMatch, []byte(s.body))
	}
	read := func(t *testing.T) (int64, json.RawMessage) {
		req := httptest.NewRequestWithContext(t.Context(), http.MethodGet, prefix+"api/v1/waitlist/state", nil)
		req.Header.Set("Authorization", "token quota-token")
		rec := fuzzDo(t, h, req)
		var got contract.WaitlistStateResponse
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
			t.Fatal(err)
		}
		if rec.Header().Get("ETag") != etag(got.Version) {
			t.Fatalf("ETag %q for version %d", rec.Header().Get("ETag"), got.Version)
		}
		return got.Version, got.State
	}
	f.Fuzz(func(t *testing.T, ifMatch string, body []byte) {
		version, _ := read(t)
		if ifMatch == "current" {
			ifMatch = etag(version)
		}
		req := httptest.NewRequestWithContext(t.Context(), http.MethodPut, prefix+"api/v1/waitlist/state", bytes.NewReader(body))
		req.Header.Set("Authorization", "token quota-token")
		if ifMatch != "" {
			req.Header.Set("If-Match", ifMatch)
		}
		rec := fuzzDo(t, h, req)
		after, stored := read(t)
		if rec.Code != http.StatusOK {
			if after != version {
				t.Fatalf("a refused write (%d) moved the version from %d to %d", rec.Code, version, after)
			}
			return
		}
		if ifMatch != etag(version) {
			t.Fatalf("If-Match %q accepted at version %d", ifMatch, version)
		}
		if after != version+1 {
			t.Fatalf("version %d after a write at %d", after, version)
		}
		var sent struct{ State any }
		if err := json.Unmarshal(body, &sent); err != nil {
			t.Fatalf("accepted a body that does not decode: %v", err)
		}
		var got any
		if err := json.Unmarshal(stored, &got); err != nil {
			t.Fatalf("stored state does not decode: %v", err)
		}
		if diff := cmp.Diff(sent.State, got); diff != "" {
			t.Fatalf("stored state (-sent +read):\n%s", diff)
		}
		if _, ok := got.(map[string]any); !ok {
			t.Fatalf("stored state %s is not a JSON object", strconv.Quote(string(stored)))
		}
	})
}
