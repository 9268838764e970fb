package bench

import (
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/quota"
	"github.com/gpuhub/gpuhub/services/internal/policy"
)

// TestAdmitHandlers: the floor and the naive enforcer answer gpu-quota's admit route alike: 400 for a body
// that is no request, the answer's shape otherwise.
func TestAdmitHandlers(t *testing.T) {
	var pol quota.Policy
	if err := policy.Decode("policy.yaml", []byte(PolicyYAML(2)), &pol); err != nil {
		t.Fatal(err)
	}
	handlers := map[string]http.Handler{
		"floor": Floor(),
		"naive": (&Naive{Client: fake.NewClientset(), Namespace: "jhub", Policy: &pol, Hours: SynthHours}).Handler(),
	}
	for name, h := range handlers {
		t.Run(name, func(t *testing.T) {
			post := func(body string) *httptest.ResponseRecorder {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/services/gpu-quota/api/v1/admit", strings.NewReader(body)))
				return rec
			}
			if rec := post("{not json"); rec.Code != http.StatusBadRequest {
				t.Errorf("bad body: status %d, want 400", rec.Code)
			}
			rec := post(`{"user":"alice","server":"","groups":["students"],"resources":{}}`)
			if rec.Code != http.StatusOK {
				t.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
			var got map[string]any
			if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]string{"allow", "message", "reason"}, slices.Sorted(maps.Keys(got))); diff != "" {
				t.Errorf("answer keys (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRaceErrorKinds: the race counts errors by kind, without the connections' addresses.
func TestRaceErrorKinds(t *testing.T) {
	for in, want := range map[string]string{
		"read tcp 127.0.0.1:38054->127.0.0.1:27921: i/o timeout":                           "read tcp ADDR->ADDR: i/o timeout",
		"waiting for a connection to 127.0.0.1:27921: context deadline exceeded":           "waiting for a connection to ADDR: context deadline exceeded",
		"admit answered 503: gpu-quota cannot decide right now: no policy loaded (v1.2.3)": "admit answered 503: gpu-quota cannot decide right now: no policy loaded (v1.2.3)",
	} {
		if got := addrs.ReplaceAllString(in, "ADDR"); got != want {
			t.Errorf("%q -> %q, want %q", in, got, want)
		}
	}
}
