package adminview

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuhub/gpuhub/hubapi/huboauth"
	"github.com/gpuhub/gpuhub/services/internal/golden"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/ledger"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/usage"
)

const prefix = "/services/gpu-usage/"

// now is the fixed clock: the last sample of the test data.
var now = time.Date(2026, 11, 23, 14, 20, 0, 0, time.UTC)

func f(v float64) *float64 { return &v }

var (
	aliceMIG = ledger.Key{User: "alice", Kind: "mig", Class: "mig A100-SXM4-40GB 3g.20gb"}
	bobT4    = ledger.Key{User: "bob", Kind: "shared", Class: "shared T4"}
	carolH   = ledger.Key{User: "carol", Kind: "gpu", Class: "gpu H100-80GB-HBM3"}
)

// testView is the cluster at at: alice busy on a MIG slice, bob on a T4 share (busy until 14:00, idle since),
// carol on an H100 whose node's telemetry is stale.
func testView(at time.Time) *usage.View {
	bobUtil := 0.0
	if at.Before(time.Date(2026, 11, 23, 14, 0, 0, 0, time.UTC)) {
		bobUtil = 60
	}
	alice := &usage.User{Name: "alice", Groups: []string{"students"}, Simulated: true, SMUtilPercent: f(70),
		Share: usage.Share{AllocatedGPUs: 3.0 / 7, UsedGPUs: f(0.3), MemoryTotalBytes: 20 << 30},
		Servers: []usage.Server{{Pod: "jupyter-alice", Namespace: "jhub", Node: "gpu-a100-0", Ready: true, AllocatedGPUs: 3.0 / 7, UsedGPUs: f(0.3), Simulated: true,
			GPUs: []usage.GPU{{Kind: "mig", Resource: "nvidia.com/mig-3g.20gb", Product: "NVIDIA A100-SXM4-40GB", Profile: "3g.20gb", Class: aliceMIG.Class,
				Share: 3.0 / 7, ShareNumerator: 3, ShareDenominator: 7, Description: "MIG 3g.20gb on an A100, 3/7 of a GPU",
				SMUtilPercent: f(70), UtilizationSource: "simulated", UsedGPUs: f(0.3)}}}}}
	bob := &usage.User{Name: "bob", Groups: []string{"students"}, Simulated: true, SMUtilPercent: f(bobUtil),
		Share: usage.Share{AllocatedGPUs: 0.25, UsedGPUs: f(bobUtil / 100)},
		Servers: []usage.Server{{Name: "train", Pod: "jupyter-bob-train", Namespace: "jhub", Node: "gpu-t4-0", Ready: true, AllocatedGPUs: 0.25, UsedGPUs: f(bobUtil / 100), Simulated: true,
			GPUs: []usage.GPU{{Kind: "shared", Resource: "nvidia.com/gpu.shared", Product: "Tesla T4", Class: bobT4.Class, Share: 0.25, ShareNumerator: 1, ShareDenominator: 4,
				Description: "1 of 4 time-sliced shares of a T4", SMUtilPercent: f(bobUtil), UtilizationSource: "simulated", UsedGPUs: f(bobUtil / 100)}}}}}
	stale := "the GPU agent on node gpu-h100-0 has not sampled since 14:18:00 UTC (2 min)"
	carol := &usage.User{Name: "carol", Groups: []string{"researchers"}, Stale: true, StaleReason: stale,
		Share: usage.Share{AllocatedGPUs: 1},
		Servers: []usage.Server{{Pod: "jupyter-carol", Namespace: "jhub", Node: "gpu-h100-0", Ready: true, AllocatedGPUs: 1, Stale: true, StaleReason: stale,
			GPUs: []usage.GPU{{Kind: "gpu", Resource: "nvidia.com/gpu", Product: "NVIDIA H100 80GB HBM3", Class: carolH.Class, Share: 1, ShareNumerator: 1, ShareDenominator: 1,
				Description: "Whole H100-80GB-HBM3", UtilizationSource: "none", Stale: true, StaleReason: stale, UtilizationUnknownReason: stale}}}}}
	sampled := at.Add(-2 * time.Minute)
	return &usage.View{
		SampledAt: at, Interval: 5 * time.Second, Offers: testOffers,
		Users: map[string]*usage.User{"alice": alice, "bob": bob, "carol": carol},
		Hub: usage.Directory{Users: map[string]usage.HubUser{
			"alice": {Name: "alice", Groups: []string{"students"}}, "bob": {Name: "bob", Groups: []string{"students"}},
			"carol": {Name: "carol", Groups: []string{"researchers"}}, "dave": {Name: "dave"}, "root": {Name: "root", Admin: true}}},
		Cluster: usage.Cluster{SampledAt: at, IntervalSeconds: 5, Simulated: true, Nodes: 3, Agents: 3, StaleAgents: 1,
			CapacityGPUs: 4, AllocatedGPUs: 3.0/7 + 0.25 + 1, UsedGPUs: 0.3 + bobUtil/100, UsedUnknownGPUs: 1,
			Classes: []usage.ClassStats{
				{Class: aliceMIG.Class, Kind: "mig", Product: "NVIDIA A100-SXM4-40GB", Profile: "3g.20gb", CapacityUnits: 2, AllocatedUnits: 1, CapacityGPUs: 6.0 / 7, AllocatedGPUs: 3.0 / 7, UsedGPUs: 0.3, SMUtilPercent: f(35)},
				{Class: bobT4.Class, Kind: "shared", Product: "Tesla T4", CapacityUnits: 4, AllocatedUnits: 1, CapacityGPUs: 1, AllocatedGPUs: 0.25, UsedGPUs: bobUtil / 100, SMUtilPercent: f(bobUtil)},
				{Class: carolH.Class, Kind: "gpu", Product: "NVIDIA H100 80GB HBM3", CapacityUnits: 2, AllocatedUnits: 1, CapacityGPUs: 2, AllocatedGPUs: 1, UsedUnknownGPUs: 1},
			},
			AgentStatus: []usage.AgentStatus{
				{Node: "gpu-a100-0", SampledAt: &at, AgeSeconds: f(0)}, {Node: "gpu-t4-0", SampledAt: &at, AgeSeconds: f(0)},
				{Node: "gpu-h100-0", SampledAt: &sampled, AgeSeconds: f(120), Stale: true, StaleReason: stale},
			}},
	}
}

// testState publishes a view every 5 minutes of the last hour, so that the history says bob has been idle since
// 14:00.
func testState() *usage.State {
	st := usage.NewState(usage.NewHistory(time.Hour, 5*time.Minute))
	for at := now.Add(-55 * time.Minute); !at.After(now); at = at.Add(5 * time.Minute) {
		st.Publish(testView(at))
	}
	return st
}

// testLedger is a SQLite ledger with ten days of GPU-hours: alice on her MIG slice for ten days, bob and carol
// since this morning. One-hour ticks with a large gap limit charge each observation for all the time since the
// previous tick.
func testLedger(t *testing.T) *ledger.Ledger {
	t.Helper()
	ctx := t.Context()
	store, err := ledger.OpenSQLite(ctx, filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	start := time.Date(2026, 11, 13, 14, 0, 0, 0, time.UTC)
	led, err := ledger.New(ctx, store, ledger.Options{Interval: time.Hour, MaxGap: 1000 * time.Hour}, start)
	if err != nil {
		t.Fatal(err)
	}
	ticks := []struct {
		at      time.Time
		samples []ledger.Sample
	}{
		{start, nil},
		{time.Date(2026, 11, 20, 14, 0, 0, 0, time.UTC), []ledger.Sample{{Key: aliceMIG, Allocated: 3.0 / 7, Used: 0.1, UsedKnown: true}}},
		{time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC), []ledger.Sample{{Key: aliceMIG, Allocated: 3.0 / 7, Used: 0.3, UsedKnown: true}}},
		{time.Date(2026, 11, 23, 13, 0, 0, 0, time.UTC), []ledger.Sample{
			{Key: aliceMIG, Allocated: 3.0 / 7, Used: 0.3, UsedKnown: true},
			{Key: bobT4, Allocated: 0.25, Used: 0.6, UsedKnown: true},
			{Key: carolH, Allocated: 1}}},
		{now, []ledger.Sample{
			{Key: aliceMIG, Allocated: 3.0 / 7, Used: 0.3, UsedKnown: true},
			{Key: bobT4, Allocated: 0.25, Used: 0, UsedKnown: true},
			{Key: carolH, Allocated: 1, Used: 0.1, UsedKnown: true}}},
	}
	for _, tk := range ticks {
		if _, err := led.Record(ctx, tk.at, tk.samples); err != nil {
			t.Fatal(err)
		}
	}
	return led
}

// testLedgerConn is the ledger as the app's connection serves it: down when down is set.
type testLedgerConn struct {
	*ledger.Ledger
	down error
}

func (l *testLedgerConn) Available() error { return l.down }

// fakeRemote answers paths from a map; a path not in it is an error, as a service that cannot be reached.
type fakeRemote struct {
	answers map[string]string
	err     error
	mu      sync.Mutex
	calls   []string
}

func (r *fakeRemote) Get(_ context.Context, path string) ([]byte, error) {
	r.mu.Lock()
	r.calls = append(r.calls, path)
	r.mu.Unlock()
	if r.err != nil {
		return nil, r.err
	}
	b, ok := r.answers[path]
	if !ok {
		return nil, errors.New("no answer for " + path)
	}
	return []byte(b), nil
}

const cullerDecisions = `{"decisions":[{"id":"c1","time":"2026-11-23T13:50:00Z","service":"gpu-culler","actor":"gpu-culler","user":"dave","server":"","action":"stop","reason":"gpu_idle","message":"Your server was stopped: its GPU was idle for 1 h.","numbers":{"idle_seconds":3600}}]}`
const cullerNotices = `{"decisions":[{"id":"c0","time":"2026-11-23T13:35:00Z","service":"gpu-culler","actor":"gpu-culler","user":"dave","server":"","action":"notice","reason":"gpu_idle","message":"Your GPU has been idle for 45 min: your server stops at 13:50 UTC unless you use it or snooze.","numbers":{"idle_seconds":2700}}]}`
const cullerSnoozes = `{"decisions":[{"id":"c2","time":"2026-11-23T14:05:00Z","service":"gpu-culler","actor":"bob","user":"bob","server":"train","action":"snooze","reason":"snoozed","numbers":{"snoozes":1,"max_snoozes":3}}]}`
const quotaDenies = `{"decisions":[{"id":"q1","time":"2026-11-23T14:10:00Z","service":"gpu-quota","actor":"gpu-quota","user":"alice","server":"big","action":"deny","reason":"max_servers","message":"You already run 1 GPU server; students may run 1 at a time.","numbers":{"limit":1,"held":1}}]}`
const quotaStops = `{"decisions":[]}`
const waitlistBody = `{"places":[
 {"user":"dave","server":"","class":"gpu H100-80GB-HBM3","kind":"gpu","description":"Whole H100-80GB-HBM3","state":"waiting","position":2,"waiting":2,"joinedAt":"2026-11-23T14:02:00Z","autoStart":true,"fairShare":1,"message":"You are 2nd in line for an H100."},
 {"user":"alice","server":"","class":"gpu H100-80GB-HBM3","kind":"gpu","description":"Whole H100-80GB-HBM3","state":"held","position":0,"waiting":2,"joinedAt":"2026-11-23T13:40:00Z","heldUntil":"2026-11-23T14:25:00Z","fairShare":0.8,"message":"An H100 is held for you until 14:25 UTC."},
 {"user":"bob","server":"train","class":"gpu H100-80GB-HBM3","kind":"gpu","description":"Whole H100-80GB-HBM3","state":"waiting","position":1,"waiting":2,"joinedAt":"2026-11-23T13:55:00Z","estimate":"2026-11-23T15:00:00Z","fairShare":0.5,"blocked":"over the 24-hour budget: keeps its place"}]}`

func remotes() (culler, quota *fakeRemote) {
	culler = &fakeRemote{answers: map[string]string{
		"api/v1/decisions?action=stop&limit=100":   cullerDecisions,
		"api/v1/decisions?action=notice&limit=100": cullerNotices,
		"api/v1/decisions?action=snooze&limit=100": cullerSnoozes,
	}}
	quota = &fakeRemote{answers: map[string]string{
		"api/v1/decisions?action=deny&limit=100": quotaDenies,
		"api/v1/decisions?action=stop&limit=100": quotaStops,
		"api/v1/waitlist":                        waitlistBody,
	}}
	return culler, quota
}

type fixture struct {
	h        http.Handler
	led      *testLedgerConn
	state    *usage.State
	culler   *fakeRemote
	quota    *fakeRemote
	profiles *fakeProfiles
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	fx := &fixture{led: &testLedgerConn{Ledger: testLedger(t)}, state: testState(), profiles: testProfiles()}
	fx.culler, fx.quota = remotes()
	fx.h = New(Options{Prefix: prefix, State: fx.state, Ledger: fx.led, Culler: fx.culler, Quota: fx.quota, Profiles: fx.profiles,
		Now: func() time.Time { return now }})
	return fx
}

var (
	root  = &huboauth.Session{User: "root", Admin: true, CSRF: "csrf-root", Expires: now.Add(time.Hour)}
	alice = &huboauth.Session{User: "alice", CSRF: "csrf-alice", Expires: now.Add(time.Hour)}
)

func serve(h http.Handler, s *huboauth.Session, method, target string) *httptest.ResponseRecorder {
	req := httptest.NewRequestWithContext(context.Background(), method, target, nil)
	if s != nil {
		req = req.WithContext(huboauth.NewContext(req.Context(), *s))
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// TestPagesGolden renders every page with fixed data and a fixed clock and compares it with testdata/*.html.
func TestPagesGolden(t *testing.T) {
	tests := map[string]struct {
		session *huboauth.Session
		target  string
		prepare func(*fixture)
	}{
		"inventory":            {session: root, target: prefix},
		"holders":              {session: root, target: prefix + "holders"},
		"holders-util-desc":    {session: root, target: prefix + "holders?sort=util&dir=desc"},
		"gpuhours-24h-user":    {session: root, target: prefix + "gpu-hours"},
		"gpuhours-7d-group":    {session: root, target: prefix + "gpu-hours?window=7d&by=group"},
		"gpuhours-custom-kind": {session: root, target: prefix + "gpu-hours?window=custom&from=2026-11-20&to=2026-11-22&by=kind"},
		"gpuhours-ledger-down": {session: root, target: prefix + "gpu-hours", prepare: func(fx *fixture) {
			fx.led.down = errors.New("the ledger database cannot be reached (retrying every 30 s)")
		}},
		"decisions":               {session: root, target: prefix + "decisions"},
		"decisions-services-down": {session: root, target: prefix + "decisions", prepare: servicesDown},
		"waitlist":                {session: root, target: prefix + "waitlist"},
		"waitlist-not-configured": {session: root, target: prefix + "waitlist", prepare: servicesDown},
		"user-carol-by-admin":     {session: root, target: prefix + "users/carol"},
		"rightsize-7d-user":       {session: root, target: prefix + "right-size"},
		"rightsize-30d-group":     {session: root, target: prefix + "right-size?period=30d&by=group"},
		"rightsize-ledger-down": {session: root, target: prefix + "right-size?by=kind", prepare: func(fx *fixture) {
			fx.profiles.err = errors.New("database is locked")
		}},
		"home-alice":      {session: alice, target: prefix},
		"forbidden-alice": {session: alice, target: prefix + "holders"},
		"unauthorized":    {target: prefix},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			fx := newFixture(t)
			if tc.prepare != nil {
				tc.prepare(fx)
			}
			rec := serve(fx.h, tc.session, http.MethodGet, tc.target)
			if ct := rec.Header().Get("Content-Type"); ct != "text/html; charset=utf-8" {
				t.Errorf("Content-Type %q", ct)
			}
			golden.Check(t, name+".html", rec.Body.String())
		})
	}
}

// servicesDown: the culler is not configured and gpu-quota does not answer.
func servicesDown(fx *fixture) {
	fx.quota.err = errors.New("gpu-quota did not answer within 2s; see whether it is running and healthy")
	fx.h = New(Options{Prefix: prefix, State: fx.state, Ledger: fx.led, Quota: fx.quota, Now: func() time.Time { return now }})
}

// TestAccess: admins see every page; a non-admin only their own page, 403 elsewhere with nothing of another
// user's; no session is 401.
func TestAccess(t *testing.T) {
	fx := newFixture(t)
	tests := map[string]struct {
		session    *huboauth.Session
		target     string
		wantStatus int
	}{
		"admin home":                 {root, prefix, 200},
		"admin holders":              {root, prefix + "holders", 200},
		"admin gpu-hours":            {root, prefix + "gpu-hours", 200},
		"admin csv":                  {root, prefix + "gpu-hours?format=csv", 200},
		"admin decisions":            {root, prefix + "decisions", 200},
		"admin waitlist":             {root, prefix + "waitlist", 200},
		"admin on alice":             {root, prefix + "users/alice", 200},
		"alice home":                 {alice, prefix, 200},
		"alice on herself":           {alice, prefix + "users/alice", 200},
		"alice on bob":               {alice, prefix + "users/bob", 403},
		"alice on an unknown user":   {alice, prefix + "users/nobody", 403},
		"alice holders":              {alice, prefix + "holders", 403},
		"alice gpu-hours":            {alice, prefix + "gpu-hours", 403},
		"alice csv":                  {alice, prefix + "gpu-hours?format=csv", 403},
		"alice decisions":            {alice, prefix + "decisions", 403},
		"alice waitlist":             {alice, prefix + "waitlist", 403},
		"no session home":            {nil, prefix, 401},
		"no session user":            {nil, prefix + "users/alice", 401},
		"no session holders":         {nil, prefix + "holders", 401},
		"css without a session":      {nil, prefix + "static/style.css", 200},
		"no such page":               {root, prefix + "nope", 404},
		"post is not allowed":        {root, prefix + "holders", 405},
		"bad sort":                   {root, prefix + "holders?sort=secret", 400},
		"bad window":                 {root, prefix + "gpu-hours?window=1y", 400},
		"custom window ends early":   {root, prefix + "gpu-hours?window=custom&from=2026-11-22&to=2026-11-20", 400},
		"custom window is not dates": {root, prefix + "gpu-hours?window=custom&from=yesterday&to=2026-11-20", 400},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			method := http.MethodGet
			if name == "post is not allowed" {
				method = http.MethodPost
			}
			rec := serve(fx.h, tc.session, method, tc.target)
			if rec.Code != tc.wantStatus {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.wantStatus, rec.Body)
			}
			if tc.session == alice {
				// Nothing of another user on anything alice is shown.
				for _, other := range []string{"bob", "carol", "dave", "gpu-t4-0", "gpu-h100-0", "jupyter-bob"} {
					if strings.Contains(rec.Body.String(), other) {
						t.Errorf("alice's answer mentions %q:\n%s", other, rec.Body)
					}
				}
			}
		})
	}
}

// TestLogoutForm: the header's logout form posts to {prefix}logout with the session's CSRF token.
func TestLogoutForm(t *testing.T) {
	fx := newFixture(t)
	body := serve(fx.h, alice, http.MethodGet, prefix).Body.String()
	for _, want := range []string{
		`<form class="who" method="post" action="/services/gpu-usage/logout">`,
		`<input type="hidden" name="` + huboauth.CSRFField + `" value="csrf-alice">`,
		`<html lang="en">`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %s", want)
		}
	}
	if n := strings.Count(body, "<h1>"); n != 1 {
		t.Errorf("%d h1 elements, want 1", n)
	}
}
