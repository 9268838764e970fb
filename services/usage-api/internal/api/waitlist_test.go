package api

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// send makes a request with a body and headers, and returns the status, the headers and the JSON body.
func send(t *testing.T, srv *httptest.Server, method, path, token, body string, header map[string]string) (int, http.Header, map[string]any) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "token "+token)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if len(b) > 0 && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("%s %s: %v: %s", method, path, err, b)
		}
	}
	return resp.StatusCode, resp.Header, m
}

const statePath = prefix + "api/v1/waitlist/state"

func putState(t *testing.T, srv *httptest.Server, token, ifMatch, body string) (int, http.Header, map[string]any) {
	t.Helper()
	h := map[string]string{"Content-Type": "application/json"}
	if ifMatch != "" {
		h["If-Match"] = ifMatch
	}
	return send(t, srv, http.MethodPut, statePath, token, body, h)
}

// TestWaitlistState (contract W1): gpu-quota reads the state, writes it on the version it read, and is told
// to read again when another writer came first.
func TestWaitlistState(t *testing.T) {
	srv := testServer(t)
	status, hdr, got := send(t, srv, http.MethodGet, statePath, "quota-token", "", nil)
	if diff := cmp.Diff(map[string]any{"version": 0.0, "state": nil}, got); status != http.StatusOK || diff != "" {
		t.Fatalf("nothing stored: %d (-want +got):\n%s", status, diff)
	}
	if hdr.Get("ETag") != `"0"` {
		t.Errorf("ETag %q, want \"0\"", hdr.Get("ETag"))
	}
	status, hdr, got = putState(t, srv, "quota-token", `"0"`, `{"state": {"queues": {"h100": ["bob"]}}}`)
	if diff := cmp.Diff(map[string]any{"version": 1.0, "updatedAt": "2026-11-22T10:30:00Z"}, got); status != http.StatusOK || diff != "" {
		t.Fatalf("first write: %d (-want +got):\n%s", status, diff)
	}
	if hdr.Get("ETag") != `"1"` {
		t.Errorf("ETag %q, want \"1\"", hdr.Get("ETag"))
	}
	// Another replica wrote on the version it read too: refused, told the stored version.
	status, hdr, got = putState(t, srv, "quota-token", `"0"`, `{"state": {"queues": {"h100": ["alice"]}}}`)
	if msg, _ := got["message"].(string); status != http.StatusPreconditionFailed || !strings.Contains(msg, "version 1, not 0") || !strings.Contains(msg, "GET it again") {
		t.Errorf("stale write: %d %v; want 412 naming version 1", status, got)
	}
	if hdr.Get("ETag") != `"1"` {
		t.Errorf("412 ETag %q, want \"1\"", hdr.Get("ETag"))
	}
	status, _, got = send(t, srv, http.MethodGet, statePath, "root-token", "", nil)
	want := map[string]any{"version": 1.0, "state": map[string]any{"queues": map[string]any{"h100": []any{"bob"}}}, "updatedAt": "2026-11-22T10:30:00Z"}
	if diff := cmp.Diff(want, got); status != http.StatusOK || diff != "" {
		t.Errorf("admin reads: %d (-want +got):\n%s", status, diff)
	}
	if status, _, got = putState(t, srv, "quota-token", `"1"`, `{"state": {}}`); status != http.StatusOK || got["version"] != 2.0 {
		t.Errorf("second write: %d %v", status, got)
	}

	for name, tc := range map[string]struct {
		ifMatch, body string
		status        int
		message       string
	}{
		"no If-Match":             {"", `{"state": {}}`, http.StatusPreconditionRequired, `If-Match: "3"`},
		"If-Match without quotes": {"2", `{"state": {}}`, http.StatusBadRequest, "not a version in quotes"},
		"If-Match not a number":   {`"two"`, `{"state": {}}`, http.StatusBadRequest, "not a version in quotes"},
		"If-Match negative":       {`"-1"`, `{"state": {}}`, http.StatusBadRequest, "not a version in quotes"},
		"If-Match any":            {`*`, `{"state": {}}`, http.StatusBadRequest, "not a version in quotes"},
		"not JSON":                {`"2"`, `queues`, http.StatusBadRequest, `{"state": {...}}`},
		"empty body":              {`"2"`, ``, http.StatusBadRequest, `{"state": {...}}`},
		"state missing":           {`"2"`, `{}`, http.StatusBadRequest, `{"state": {...}}`},
		"state null":              {`"2"`, `{"state": null}`, http.StatusBadRequest, `{"state": {...}}`},
		"state an array":          {`"2"`, `{"state": ["bob"]}`, http.StatusBadRequest, `{"state": {...}}`},
		"body an array":           {`"2"`, `[{"state": {}}]`, http.StatusBadRequest, `{"state": {...}}`},
		"an unknown member":       {`"2"`, `{"state": {}, "version": 3}`, http.StatusBadRequest, `unknown field "version"`},
		"two objects":             {`"2"`, `{"state": {}} {"state": {}}`, http.StatusBadRequest, "more after it"},
		"too big":                 {`"2"`, `{"state": {"pad": "` + strings.Repeat("x", MaxWaitlistBody) + `"}}`, http.StatusRequestEntityTooLarge, "1 MiB"},
	} {
		t.Run(name, func(t *testing.T) {
			status, _, got := putState(t, srv, "quota-token", tc.ifMatch, tc.body)
			if msg, _ := got["message"].(string); status != tc.status || !strings.Contains(msg, tc.message) {
				t.Errorf("%d %q, want %d with %q", status, msg, tc.status, tc.message)
			}
		})
	}
	// Nothing above was written.
	if _, _, got = send(t, srv, http.MethodGet, statePath, "quota-token", "", nil); got["version"] != 2.0 {
		t.Errorf("after refused writes: %v, want version 2", got)
	}
	// A state just under the limit is taken, compacted.
	big := `{"state": {"pad": "` + strings.Repeat("x", MaxWaitlistBody-40) + `"}}`
	if status, _, got = putState(t, srv, "quota-token", `"2"`, big); status != http.StatusOK {
		t.Errorf("a state under 1 MiB: %d %v", status, got)
	}
}

// TestWaitlistStateWho: gpu-quota (in --waitlist-services) reads and writes; admins read; everyone else 403
// with a message naming the flag.
func TestWaitlistStateWho(t *testing.T) {
	srv := testServer(t)
	for name, tc := range map[string]struct {
		method, token string
		status        int
	}{
		"waitlist service reads":        {http.MethodGet, "quota-token", http.StatusOK},
		"waitlist service writes":       {http.MethodPut, "quota-token", http.StatusOK},
		"admin reads":                   {http.MethodGet, "root-token", http.StatusOK},
		"admin may not write":           {http.MethodPut, "root-token", http.StatusForbidden},
		"a user may not read":           {http.MethodGet, "alice-token", http.StatusForbidden},
		"a user may not write":          {http.MethodPut, "alice-token", http.StatusForbidden},
		"another service may not read":  {http.MethodGet, "culler-token", http.StatusForbidden},
		"another service may not write": {http.MethodPut, "culler-token", http.StatusForbidden},
		"no token":                      {http.MethodGet, "", http.StatusUnauthorized},
		"no token, write":               {http.MethodPut, "", http.StatusUnauthorized},
	} {
		t.Run(name, func(t *testing.T) {
			// Each write is a first write: the version read just before.
			_, _, cur := send(t, srv, http.MethodGet, statePath, "quota-token", "", nil)
			status, _, got := send(t, srv, tc.method, statePath, tc.token, `{"state": {}}`,
				map[string]string{"If-Match": etag(int64(cur["version"].(float64)))})
			if status != tc.status {
				t.Errorf("%d %v, want %d", status, got, tc.status)
			}
			if msg, _ := got["message"].(string); status == http.StatusForbidden && !strings.Contains(msg, "--waitlist-services (now: gpu-quota)") {
				t.Errorf("403 message %q does not name --waitlist-services", msg)
			}
		})
	}
	for name, tc := range map[string]struct {
		method, path string
		status       int
		allow        string
	}{
		"options on the state":  {http.MethodOptions, statePath, http.StatusNoContent, "GET, HEAD, PUT, OPTIONS"},
		"options elsewhere":     {http.MethodOptions, prefix + "api/v1/me", http.StatusNoContent, "GET, HEAD, OPTIONS"},
		"delete the state":      {http.MethodDelete, statePath, http.StatusMethodNotAllowed, "GET, HEAD, PUT, OPTIONS"},
		"put elsewhere":         {http.MethodPut, prefix + "api/v1/me", http.StatusMethodNotAllowed, "GET, HEAD, OPTIONS"},
		"post to the state":     {http.MethodPost, statePath, http.StatusMethodNotAllowed, "GET, HEAD, PUT, OPTIONS"},
		"head of the state":     {http.MethodHead, statePath, http.StatusOK, ""},
		"put on a state subdir": {http.MethodPut, statePath + "/x", http.StatusMethodNotAllowed, "GET, HEAD, OPTIONS"},
	} {
		t.Run(name, func(t *testing.T) {
			status, hdr, _ := send(t, srv, tc.method, tc.path, "quota-token", "", nil)
			if status != tc.status || hdr.Get("Allow") != tc.allow {
				t.Errorf("%d Allow %q, want %d Allow %q", status, hdr.Get("Allow"), tc.status, tc.allow)
			}
		})
	}
}

// TestWaitlistStateRace: two replicas of gpu-quota write on the same version at once, round after round:
// exactly one gets 200, the other 412.
func TestWaitlistStateRace(t *testing.T) {
	srv := testServer(t)
	for round := range 10 {
		var wg sync.WaitGroup
		start := make(chan struct{})
		var statuses [2]int
		for i := range statuses {
			wg.Go(func() {
				<-start
				statuses[i], _, _ = putState(t, srv, "quota-token", etag(int64(round)), `{"state": {"writer": `+string(rune('0'+i))+`}}`)
			})
		}
		close(start)
		wg.Wait()
		ok, stale := 0, 0
		for _, s := range statuses {
			switch s {
			case http.StatusOK:
				ok++
			case http.StatusPreconditionFailed:
				stale++
			}
		}
		if ok != 1 || stale != 1 {
			t.Fatalf("round %d: statuses %v, want one 200 and one 412", round, statuses)
		}
	}
}

// TestWaitlistStateUnavailable: 503 with Retry-After while the ledger's database cannot answer; nothing lost.
func TestWaitlistStateUnavailable(t *testing.T) {
	srv, led := testServerWithLedger(t)
	down := errors.New("the ledger database cannot be reached (retrying every 30 s)")
	led.down.Store(&down)
	for _, method := range []string{http.MethodGet, http.MethodPut} {
		status, hdr, got := send(t, srv, method, statePath, "quota-token", `{"state": {}}`, map[string]string{"If-Match": `"0"`})
		if msg, _ := got["message"].(string); status != http.StatusServiceUnavailable || hdr.Get("Retry-After") == "" ||
			!strings.Contains(msg, "the waitlist state is unavailable: the ledger database cannot be reached") {
			t.Errorf("%s while down: %d Retry-After %q %q", method, status, hdr.Get("Retry-After"), msg)
		}
	}
	led.down.Store(nil)
	if status, _, got := putState(t, srv, "quota-token", `"0"`, `{"state": {}}`); status != http.StatusOK {
		t.Errorf("back up: %d %v", status, got)
	}
}

// TestOpenAPIWaitlist keeps openapi.yaml honest about the waitlist answers.
func TestOpenAPIWaitlist(t *testing.T) {
	srv := testServer(t)
	_, _, written := putState(t, srv, "quota-token", `"0"`, `{"state": {"queues": {}}}`)
	_, _, state := send(t, srv, http.MethodGet, statePath, "quota-token", "", nil)
	_, _, stale := putState(t, srv, "quota-token", `"0"`, `{"state": {}}`)
	checkSchemas(t, readSchemas(t), map[string]map[string]any{"WaitlistWritten": written, "WaitlistState": state, "Error": stale})
}
