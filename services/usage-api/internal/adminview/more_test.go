package adminview

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuhub/gpuhub/hubapi"
	"github.com/gpuhub/gpuhub/hubapi/hubapitest"
	"github.com/gpuhub/gpuhub/hubapi/hubauth"
	"github.com/gpuhub/gpuhub/services/internal/contract"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/api"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/ledger"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/usage"
)

var (
	rowUser  = regexp.MustCompile(`<tr><th scope="row"><a href="/services/gpu-usage/users/([a-z]+)">`)
	ariaSort = regexp.MustCompile(`aria-sort="(ascending|descending)"><a href="[^"]*sort=([a-z]+)`)
)

// TestHoldersSort: server-side sorting by column and direction, unknown values last either way, and aria-sort
// on the sorted column's header only.
func TestHoldersSort(t *testing.T) {
	fx := newFixture(t)
	tests := map[string]struct {
		query     string
		wantUsers []string
		wantAria  []string
	}{
		"default: user ascending": {"", []string{"alice", "bob", "carol"}, []string{"ascending", "user"}},
		"user descending":         {"sort=user&dir=desc", []string{"carol", "bob", "alice"}, []string{"descending", "user"}},
		"util descending":         {"sort=util&dir=desc", []string{"alice", "bob", "carol"}, []string{"descending", "util"}},
		"util ascending":          {"sort=util&dir=asc", []string{"bob", "alice", "carol"}, []string{"ascending", "util"}},
		"allocated descending":    {"sort=allocated&dir=desc", []string{"carol", "alice", "bob"}, []string{"descending", "allocated"}},
		"idle descending":         {"sort=idle&dir=desc", []string{"bob", "alice", "carol"}, []string{"descending", "idle"}},
		"node ascending":          {"sort=node", []string{"alice", "carol", "bob"}, []string{"ascending", "node"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			rec := serve(fx.h, root, http.MethodGet, prefix+"holders?"+tc.query)
			if rec.Code != http.StatusOK {
				t.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
			body := rec.Body.String()
			var users []string
			for _, m := range rowUser.FindAllStringSubmatch(body, -1) {
				users = append(users, m[1])
			}
			if diff := cmp.Diff(tc.wantUsers, users); diff != "" {
				t.Errorf("order (-want +got):\n%s", diff)
			}
			aria := ariaSort.FindAllStringSubmatch(body, -1)
			if len(aria) != 1 {
				t.Fatalf("%d headers with aria-sort, want 1", len(aria))
			}
			if diff := cmp.Diff(tc.wantAria, aria[0][1:]); diff != "" {
				t.Errorf("aria-sort (-want +got):\n%s", diff)
			}
		})
	}
}

// TestUserIdle: idle time from the history, per user.
func TestUserIdle(t *testing.T) {
	st := testState()
	tests := map[string]struct {
		user string
		want idleTime
	}{
		"busy":                {"alice", idleTime{Known: true, Busy: true}},
		"idle since 14:00":    {"bob", idleTime{Known: true, D: 20 * time.Minute}},
		"unknown utilization": {"carol", idleTime{Why: "utilization unknown now"}},
		"no history":          {"dave", idleTime{Why: "no history yet"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := userIdle(st.History.User(tc.user, time.Time{}), now)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("userIdle (-want +got):\n%s", diff)
			}
		})
	}
	// Idle for the whole history: at least as long as it reaches back.
	allIdle := testStateWith(func(at time.Time) float64 { return 0 })
	got := userIdle(allIdle.History.User("bob", time.Time{}), now)
	if want := (idleTime{Known: true, D: 55 * time.Minute, AtLeast: true}); got != want {
		t.Errorf("all idle: got %+v, want %+v", got, want)
	}
	if got.String() != "at least 55 min" {
		t.Errorf("String() = %q", got.String())
	}
}

// testStateWith is testState with bob's utilization at each sample from util.
func testStateWith(util func(time.Time) float64) *usage.State {
	st := usage.NewState(usage.NewHistory(time.Hour, 5*time.Minute))
	for at := now.Add(-55 * time.Minute); !at.After(now); at = at.Add(5 * time.Minute) {
		v := testView(at)
		u := util(at)
		v.Users["bob"].SMUtilPercent, v.Users["bob"].Share.UsedGPUs = &u, f(u/100)
		st.Publish(v)
	}
	return st
}

// TestCSVMatchesJSON: the CSV's numbers are the JSON API's for the same window: per user GET
// api/v1/users/{name}?from=&to= (gpuHours.custom, and its byClass for kinds and classes); per group the sum of
// its members'; for 7d and 30d also api/v1/users' own "7d" and "30d".
func TestCSVMatchesJSON(t *testing.T) {
	fx := newFixture(t)
	hub := hubapitest.New(t)
	for _, u := range []hubapi.User{{Name: "root", Admin: true}, {Name: "alice", Groups: []string{"students"}}, {Name: "bob", Groups: []string{"students"}}, {Name: "carol", Groups: []string{"researchers"}}} {
		hub.AddUser(u)
	}
	hub.AddToken("root-token", "root")
	auth := hubauth.New(hubauth.Options{Hub: hub.Client("service-token")})
	jsonAPI := httptest.NewServer(api.New(api.Options{Prefix: prefix, State: fx.state, Ledger: fx.led, Auth: auth.Middleware, Now: func() time.Time { return now }}))
	t.Cleanup(jsonAPI.Close)
	getJSON := func(t *testing.T, path string, out any) {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, jsonAPI.URL+path, nil)
		req.Header.Set("Authorization", "token root-token")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d", path, resp.StatusCode)
		}
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatal(err)
		}
	}
	type totals struct{ Allocated, Used, UsedUnknown float64 }
	type custom struct {
		totals
		ByClass []struct {
			Kind, Class string
			totals
		} `json:"byClass"`
	}
	userJSON := func(t *testing.T, name, from, to string) custom {
		var ans struct {
			GPUHours struct {
				Custom custom `json:"custom"`
			} `json:"gpuHours"`
		}
		getJSON(t, prefix+"api/v1/users/"+name+"?history=false&from="+from+"&to="+to, &ans)
		return ans.GPUHours.Custom
	}
	users := []string{"alice", "bob", "carol"}
	groups := map[string][]string{"students": {"alice", "bob"}, "researchers": {"carol"}}
	for _, query := range []string{
		"window=24h&by=user", "window=7d&by=user", "window=30d&by=user", "window=custom&from=2026-11-20&to=2026-11-22&by=user",
		"window=7d&by=group", "window=30d&by=kind", "window=24h&by=class",
	} {
		t.Run(query, func(t *testing.T) {
			rec := serve(fx.h, root, http.MethodGet, prefix+"gpu-hours?format=csv&"+query)
			if rec.Code != http.StatusOK {
				t.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
			if cd := rec.Header().Get("Content-Disposition"); !strings.HasPrefix(cd, `attachment; filename="gpu-hours-`) {
				t.Errorf("Content-Disposition %q", cd)
			}
			records, err := csv.NewReader(rec.Body).ReadAll()
			if err != nil {
				t.Fatal(err)
			}
			if len(records) < 2 {
				t.Fatalf("CSV has no data: %v", records)
			}
			by := records[0][3]
			from, to := records[1][1], records[1][2]
			want := map[string]totals{}
			for _, u := range users {
				c := userJSON(t, u, from, to)
				switch by {
				case "user":
					want[u] = c.totals
				case "group":
					for g, members := range groups {
						for _, m := range members {
							if m == u {
								w := want[g]
								w.Allocated, w.Used, w.UsedUnknown = w.Allocated+c.Allocated, w.Used+c.Used, w.UsedUnknown+c.UsedUnknown
								want[g] = w
							}
						}
					}
				case "kind", "class":
					for _, bc := range c.ByClass {
						k := bc.Kind
						if by == "class" {
							k = bc.Class
						}
						w := want[k]
						w.Allocated, w.Used, w.UsedUnknown = w.Allocated+bc.Allocated, w.Used+bc.Used, w.UsedUnknown+bc.UsedUnknown
						want[k] = w
					}
				}
			}
			for k, w := range want {
				if w == (totals{}) {
					delete(want, k) // the CSV leaves out who has no GPU-hours in the window
				}
			}
			got := map[string]totals{}
			for _, r := range records[1:] {
				if r[1] != from || r[2] != to {
					t.Errorf("row %v: bounds differ from the first row's", r)
				}
				got[r[3]] = totals{parse(t, r[4]), parse(t, r[5]), parse(t, r[6])}
			}
			// Six decimals in the CSV: equal to the JSON's numbers within half a unit of the last.
			if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b float64) bool { return math.Abs(a-b) <= 5e-7 })); diff != "" {
				t.Errorf("CSV vs JSON (-json +csv):\n%s", diff)
			}
			if strings.HasPrefix(query, "window=7d&by=user") || strings.HasPrefix(query, "window=30d&by=user") {
				key := strings.TrimSuffix(strings.TrimPrefix(query, "window="), "&by=user")
				var list contract.UsersResponse
				getJSON(t, prefix+"api/v1/users", &list)
				for _, item := range list.Items {
					w := item.GPUHours[key]
					if g, ok := got[item.Name]; ok && (math.Abs(g.Allocated-w.Allocated) > 5e-7 || math.Abs(g.Used-w.Used) > 5e-7 || math.Abs(g.UsedUnknown-w.UsedUnknown) > 5e-7) {
						t.Errorf("%s %s: CSV %+v, api/v1/users %+v", item.Name, key, g, *w)
					}
				}
			}
		})
	}
}

func parse(t *testing.T, s string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestCSVLedgerDown: no CSV while the ledger cannot answer, a 503 that says why.
func TestCSVLedgerDown(t *testing.T) {
	fx := newFixture(t)
	fx.led.down = fmt.Errorf("the ledger database cannot be reached (retrying every 30 s)")
	rec := serve(fx.h, root, http.MethodGet, prefix+"gpu-hours?format=csv")
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "cannot be reached") || rec.Header().Get("Retry-After") == "" {
		t.Errorf("got %d %q", rec.Code, rec.Body)
	}
}

// TestChart: the SVG's series for known buckets, a gap hour drawn as 0, and the axis scale.
func TestChart(t *testing.T) {
	from := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	w := window{Name: "custom", From: from, To: from.Add(2*time.Hour + 30*time.Minute)}
	c := newChart(w, []ledger.HourTotals{
		{Bucket: from, Totals: ledger.Totals{Allocated: 2, Used: 1}, Idle: 1},
		// 11:00 has no GPU-hours.
		{Bucket: from.Add(2 * time.Hour), Totals: ledger.Totals{Allocated: 1, Used: 0.5}, Idle: 0.25},
	})
	want := &chart{Width: 760, Height: 260, Left: 56, Right: 744, Top: 16, Bottom: 220, Buckets: 3,
		Held: "56.0,16.0 400.0,220.0 744.0,118.0", Used: "56.0,118.0 400.0,220.0 744.0,169.0", Idle: "56.0,118.0 400.0,220.0 744.0,194.5",
		IdleArea:  "56.0,118.0 400.0,220.0 744.0,194.5 744.0,220.0 56.0,220.0",
		YTicks:    []tick{{220, "0"}, {169, "0.5"}, {118, "1"}, {67, "1.5"}, {16, "2"}},
		XTicks:    []tick{{56, "10:00"}, {400, "11:00"}, {744, "12:00"}},
		TotalHeld: 3, TotalUsed: 1.5, TotalIdle: 1.25, PeakY: 2, PeakAt: from,
		Summary: "3 hours from 2026-11-23 10:00 UTC: 3.00 GPU-hours held, 1.50 used, 1.25 idle but held. The most held in one hour: 2.00 GPUs at 2026-11-23 10:00 UTC."}
	if diff := cmp.Diff(want, c); diff != "" {
		t.Errorf("chart (-want +got):\n%s", diff)
	}
	for top, wantScale := range map[float64][2]float64{0: {0.25, 1}, 0.3: {0.1, 0.3}, 1.68: {0.5, 2}, 7: {2, 8}, 120: {50, 150}} {
		step, ymax := niceScale(top)
		if math.Abs(step-wantScale[0]) > 1e-12 || math.Abs(ymax-wantScale[1]) > 1e-12 {
			t.Errorf("niceScale(%g) = %g, %g; want %g, %g", top, step, ymax, wantScale[0], wantScale[1])
		}
	}
}

// TestRemoteCalls: one page view asks each remote once per action, and the pages keep working when a service
// is down.
func TestRemoteCalls(t *testing.T) {
	fx := newFixture(t)
	if rec := serve(fx.h, root, http.MethodGet, prefix+"decisions"); rec.Code != http.StatusOK {
		t.Fatalf("status %d", rec.Code)
	}
	if got := len(fx.culler.calls) + len(fx.quota.calls); got != 5 {
		t.Errorf("%d remote calls for one view, want 5 (3 culler actions, 2 quota actions)", got)
	}
	fx.quota.err = fmt.Errorf("gpu-quota cannot be reached; see whether it is running")
	rec := serve(fx.h, root, http.MethodGet, prefix+"waitlist")
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "gpu-quota cannot be reached") {
		t.Errorf("waitlist with gpu-quota down: %d\n%s", rec.Code, rec.Body)
	}
}
