package api

import (
	"encoding/csv"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuhub/gpuhub/services/internal/contract"
	"github.com/gpuhub/gpuhub/services/internal/gpu"
	"github.com/gpuhub/gpuhub/services/internal/rightsize"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/ledger"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/profile"
)

const a100 = "A100-SXM4-40GB"

// a100Offers are what the test cluster's nodes offer: MIG 3g.20gb and 1g.5gb of an A100.
var a100Offers = []rightsize.Offer{
	{Kind: gpu.KindMIG, Class: "mig " + a100 + " 1g.5gb", Product: a100, Description: "MIG 1g.5gb on an A100, 1/7 of a GPU", MemoryBytes: 4864 << 20, ComputeGPUs: 1.0 / 7},
	{Kind: gpu.KindMIG, Class: "mig " + a100 + " 3g.20gb", Product: a100, Description: "MIG 3g.20gb on an A100, 3/7 of a GPU", MemoryBytes: 19968 << 20, ComputeGPUs: 3.0 / 7},
}

// a100Free is what is free of them now: six 1g.5gb slices, no 3g.20gb.
var a100Free = map[string]int64{"mig " + a100 + " 1g.5gb": 6, "mig " + a100 + " 3g.20gb": 0}

// putProfiles stores a day of alice on a MIG 3g.20gb at 20 % of the instance with 3 GiB (advice: 1g.5gb, 2/7 GPU
// saved per hour over her 10 hours held) and a day of bob with 10 busy minutes on simulated GPUs (not enough data).
func putProfiles(t *testing.T, led *testLedger) {
	t.Helper()
	day := ledger.DayOf(now)
	hist := func(bin, n int) []uint32 {
		h := make([]uint32, ledger.SMBins)
		h[bin] = uint32(n)
		return h
	}
	days := []ledger.ProfileDay{
		{User: "alice", Class: "mig " + a100 + " 3g.20gb", Day: day, Kind: "mig", Product: a100, MemoryTotalBytes: 19968 << 20,
			HeldGPUs: 3.0 / 7, Scale: 3.0 / 7, First: day.Add(time.Minute), Last: now, HeldS: 36000, BusyS: 7200, BusySamples: 1440,
			PeakMemoryBytes: 3 << 30, MemoryHist: hist(15, 2000), SMHist: hist(19, 1440)},
		{User: "bob", Server: "big", Class: "mig " + a100 + " 3g.20gb", Day: day, Kind: "mig", Product: a100, MemoryTotalBytes: 19968 << 20,
			HeldGPUs: 3.0 / 7, Scale: 3.0 / 7, First: day.Add(time.Minute), Last: now, HeldS: 3600, BusyS: 600, BusySamples: 120,
			PeakMemoryBytes: 1 << 30, MemoryHist: hist(5, 720), SMHist: hist(50, 120), Simulated: true},
	}
	if err := led.PutProfiles(t.Context(), days, day.AddDate(0, 0, -30)); err != nil {
		t.Fatal(err)
	}
}

func TestRightSizeAuthorization(t *testing.T) {
	srv, led := testServerWithLedger(t)
	putProfiles(t, led)
	for name, tc := range map[string]struct {
		path, token string
		want        int
	}{
		"alice reads her advice":               {"api/v1/me/right-size", "alice-token", http.StatusOK},
		"alice reads herself by name":          {"api/v1/users/alice/right-size", "alice-token", http.StatusOK},
		"bob cannot read alice's advice":       {"api/v1/users/alice/right-size", "bob-token", http.StatusForbidden},
		"admin reads alice's advice":           {"api/v1/users/alice/right-size", "root-token", http.StatusOK},
		"a service has no me":                  {"api/v1/me/right-size", "quota-token", http.StatusForbidden},
		"a token for alice only, on bob's":     {"api/v1/users/bob/right-size", "alice-scoped-token", http.StatusForbidden},
		"a token for alice only, on alice's":   {"api/v1/users/alice/right-size", "alice-scoped-token", http.StatusOK},
		"a reader service reads one user's":    {"api/v1/users/alice/right-size", "quota-token", http.StatusOK},
		"a service not listed cannot read one": {"api/v1/users/alice/right-size", "culler-token", http.StatusForbidden},
		"no token":                             {"api/v1/me/right-size", "", http.StatusUnauthorized},
		"alice cannot read everyone's":         {"api/v1/right-size", "alice-token", http.StatusForbidden},
		"admin reads everyone's":               {"api/v1/right-size", "root-token", http.StatusOK},
		"a reader service reads everyone's":    {"api/v1/right-size", "quota-token", http.StatusOK},
		"a service not listed cannot":          {"api/v1/right-size", "culler-token", http.StatusForbidden},
		"period not offered":                   {"api/v1/me/right-size?period=1y", "alice-token", http.StatusBadRequest},
		"by not offered":                       {"api/v1/right-size?by=class", "root-token", http.StatusBadRequest},
		"format not offered":                   {"api/v1/right-size?format=xml", "root-token", http.StatusBadRequest},
		"every period":                         {"api/v1/right-size?period=30d&by=kind&format=csv", "root-token", http.StatusOK},
		"another user's advice with a period":  {"api/v1/users/bob/right-size?period=24h", "root-token", http.StatusOK},
	} {
		t.Run(name, func(t *testing.T) {
			status, body := get(t, srv, http.MethodGet, prefix+tc.path, tc.token)
			if status != tc.want {
				t.Errorf("status %d, want %d (%v)", status, tc.want, body)
			}
			if status >= 400 && body["message"] == nil {
				t.Errorf("%d without a JSON message: %v", status, body)
			}
		})
	}
}

func TestRightSizeAdvice(t *testing.T) {
	srv, led := testServerWithLedger(t)
	putProfiles(t, led)
	resp := do(t, srv, prefix+"api/v1/me/right-size", "alice-token")
	defer func() { _ = resp.Body.Close() }()
	var got contract.RightSizeResponse
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	type short struct {
		User, Period, Verdict string
		From                  time.Time
		Candidates            []string
		FreeNow               []int64
		P95SMUtilPercent      float64
	}
	var gotShort []short
	for _, a := range got.Servers {
		s := short{User: got.User, Period: got.Period, From: got.From, Verdict: a.Verdict, P95SMUtilPercent: a.Evidence.P95SMUtilPercent}
		for _, c := range a.Candidates {
			s.Candidates = append(s.Candidates, c.Class)
			if c.FreeNow == nil {
				t.Errorf("candidate %s without freeNow, want what the view counts free", c.Class)
				continue
			}
			s.FreeNow = append(s.FreeNow, *c.FreeNow)
		}
		gotShort = append(gotShort, s)
	}
	want := []short{{User: "alice", Period: "7d", From: ledger.DayOf(now).AddDate(0, 0, -7), Verdict: contract.VerdictSmaller,
		Candidates: []string{"mig " + a100 + " 1g.5gb"}, FreeNow: []int64{6}, P95SMUtilPercent: 20}}
	if diff := cmp.Diff(want, gotShort); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestRightSizeSavingsCSVMatchesJSON: the CSV holds the JSON's rows; by group, a user in no group counts under
// "(no group)".
func TestRightSizeSavingsCSVMatchesJSON(t *testing.T) {
	srv, led := testServerWithLedger(t)
	putProfiles(t, led)
	for _, by := range []string{"user", "group", "kind"} {
		t.Run(by, func(t *testing.T) {
			resp := do(t, srv, prefix+"api/v1/right-size?by="+by, "root-token")
			var js contract.RightSizeSavings
			err := json.NewDecoder(resp.Body).Decode(&js)
			_ = resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if want := 2.0 / 7 * 10; js.SaveableGPUHours-want > 1e-9 || want-js.SaveableGPUHours > 1e-9 {
				t.Errorf("saveable %v GPU-hours, want %v", js.SaveableGPUHours, want)
			}
			resp = do(t, srv, prefix+"api/v1/right-size?format=csv&by="+by, "root-token")
			defer func() { _ = resp.Body.Close() }()
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/csv") {
				t.Errorf("Content-Type %q", ct)
			}
			recs, err := csv.NewReader(resp.Body).ReadAll()
			if err != nil {
				t.Fatal(err)
			}
			var want [][]string
			want = append(want, []string{"period", "from", "to", by, "saveable_gpu_hours", "held_gpu_hours", "servers", "advised_smaller",
				"simulated", "stale"})
			for _, r := range js.Rows {
				want = append(want, []string{"7d", js.From.Format(time.RFC3339), js.AsOf.Format(time.RFC3339), r.Key,
					profile.GPUHours(r.SaveableGPUHours), profile.GPUHours(r.HeldGPUHours), itoa(r.Servers), itoa(r.Smaller), itoa(r.Simulated), itoa(r.Stale)})
			}
			// bob's day was measured on simulated GPUs: his row, and every row he is in, says so.
			wantSim := map[string][]int{"user": {0, 1}, "group": {0, 1}, "kind": {1}}[by]
			var sims []int
			for _, r := range js.Rows {
				sims = append(sims, r.Simulated)
			}
			if diff := cmp.Diff(wantSim, sims); diff != "" {
				t.Errorf("simulated per row (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(want, recs); diff != "" {
				t.Errorf("CSV against JSON (-json +csv):\n%s", diff)
			}
			var keys []string
			for _, r := range js.Rows {
				keys = append(keys, r.Key)
			}
			wantKeys := map[string][]string{"user": {"alice", "bob"}, "group": {"physics", "(no group)"}, "kind": {"mig"}}[by]
			if diff := cmp.Diff(wantKeys, keys); diff != "" {
				t.Errorf("rows (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRightSizeLedgerDown(t *testing.T) {
	srv, led := testServerWithLedger(t)
	down := errors.New("the ledger database cannot be reached (retrying every 30 s)")
	led.down.Store(&down)
	resp := do(t, srv, prefix+"api/v1/me/right-size", "alice-token")
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), "cannot be reached") {
		t.Errorf("%d Retry-After %q: %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestOpenAPIRightSize: real right-size answers against their schemas (the candidate, an allOf, is checked
// against the Go type by services/internal/contract's test).
func TestOpenAPIRightSize(t *testing.T) {
	srv, led := testServerWithLedger(t)
	putProfiles(t, led)
	_, advice := get(t, srv, http.MethodGet, prefix+"api/v1/me/right-size", "alice-token")
	_, savings := get(t, srv, http.MethodGet, prefix+"api/v1/right-size", "root-token")
	one := advice["servers"].([]any)[0].(map[string]any)
	checkSchemas(t, readSchemas(t), map[string]map[string]any{
		"RightSizeAdvice":     advice,
		"RightSize":           one,
		"RightSizeKind":       one["held"].(map[string]any),
		"RightSizeEvidence":   one["evidence"].(map[string]any),
		"RightSizeSavings":    savings,
		"RightSizeSavingsRow": savings["rows"].([]any)[0].(map[string]any),
	})
}

// TestAdviceReaders: a Hub service of AdviceReaders (gpu-profiles, for the spawn form's mark) reads any user's
// right-size advice and nothing else of other users; a service of ReaderServices (gpu-quota) still reads all it
// did. A service in neither list is told which flag would let it read advice.
func TestAdviceReaders(t *testing.T) {
	srv, led := testServerWithLedger(t)
	putProfiles(t, led)
	endpoints := map[string]string{
		"alice's advice":     "api/v1/users/alice/right-size",
		"bob's advice":       "api/v1/users/bob/right-size?period=24h",
		"own advice":         "api/v1/me/right-size",
		"right-size savings": "api/v1/right-size?by=group&format=csv",
		"gpu-hours":          "api/v1/gpu-hours?windows=24h",
		"gpu-hours/decayed":  "api/v1/gpu-hours/decayed?halfLife=7d",
		"servers":            "api/v1/servers",
		"users/alice":        "api/v1/users/alice",
		"users":              "api/v1/users",
		"waitlist state":     "api/v1/waitlist/state",
	}
	for name, tc := range map[string]struct {
		token string
		want  map[string]int
	}{
		"an advice reader reads advice only": {"profiles-token", map[string]int{
			"alice's advice": http.StatusOK, "bob's advice": http.StatusOK, "own advice": http.StatusForbidden,
			"right-size savings": http.StatusForbidden, "gpu-hours": http.StatusForbidden, "gpu-hours/decayed": http.StatusForbidden,
			"servers": http.StatusForbidden, "users/alice": http.StatusForbidden, "users": http.StatusForbidden,
			"waitlist state": http.StatusForbidden,
		}},
		"a reader service reads what it did": {"quota-token", map[string]int{
			"alice's advice": http.StatusOK, "bob's advice": http.StatusOK, "own advice": http.StatusForbidden,
			"right-size savings": http.StatusOK, "gpu-hours": http.StatusOK, "gpu-hours/decayed": http.StatusOK,
			"servers": http.StatusOK, "users/alice": http.StatusForbidden, "users": http.StatusForbidden,
			"waitlist state": http.StatusOK, // as the waitlist writer (WaitlistServices)
		}},
		"a service in neither list reads none": {"culler-token", map[string]int{
			"alice's advice": http.StatusForbidden, "bob's advice": http.StatusForbidden, "own advice": http.StatusForbidden,
			"right-size savings": http.StatusForbidden, "gpu-hours": http.StatusForbidden, "gpu-hours/decayed": http.StatusForbidden,
			"servers": http.StatusForbidden, "users/alice": http.StatusForbidden, "users": http.StatusForbidden,
			"waitlist state": http.StatusForbidden,
		}},
	} {
		t.Run(name, func(t *testing.T) {
			got := map[string]int{}
			for e, path := range endpoints {
				got[e], _ = get(t, srv, http.MethodGet, prefix+path, tc.token)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("status by endpoint (-want +got):\n%s", diff)
			}
		})
	}
	// The refusals name the flag that would admit the caller.
	for name, tc := range map[string]struct {
		path, token, want string
	}{
		"a service on one user's advice": {"api/v1/users/alice/right-size", "culler-token",
			`the Hub service "gpu-culler" may not read other users' right-size advice: list it in the usage API's --advice-readers`},
		"an advice reader on the savings": {"api/v1/right-size", "profiles-token", "--reader-services"},
		"an advice reader on GPU-hours":   {"api/v1/gpu-hours?windows=24h", "profiles-token", "--reader-services"},
		"an advice reader on the servers": {"api/v1/servers", "profiles-token", "--reader-services"},
		"a user on another user's advice": {"api/v1/users/alice/right-size", "bob-token", `you may read only your own right-size advice; "alice" is another user's`},
	} {
		t.Run(name, func(t *testing.T) {
			status, body := get(t, srv, http.MethodGet, prefix+tc.path, tc.token)
			if msg, _ := body["message"].(string); status != http.StatusForbidden || !strings.Contains(msg, tc.want) {
				t.Errorf("%d %q, want 403 with %q", status, msg, tc.want)
			}
		})
	}
}
