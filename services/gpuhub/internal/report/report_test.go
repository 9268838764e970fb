package report

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuhub/gpuhub/services/gpuhub/internal/policycmd"
	"github.com/gpuhub/gpuhub/services/internal/golden"
)

var asOf = time.Date(2026, 11, 27, 15, 20, 0, 0, time.UTC)

// class is one GPU class's GPU-hours in a fake user's window.
type class struct {
	kind, class                  string
	allocated, used, usedUnknown float64
}

type fakeUser struct {
	groups []string
	// classes are the last 30 days' GPU-hours, which the fake also answers for a custom window; the 7d
	// window is a quarter of them.
	classes []class
}

var fakeUsers = map[string]fakeUser{
	"alice": {groups: []string{"students"}, classes: []class{{"mig", "mig A100-SXM4-40GB 3g.20gb", 6, 3, 0}}},
	"bob": {groups: []string{"students"}, classes: []class{{"shared", "shared T4", 2, 0.5, 0},
		{"mig", "mig A100-SXM4-40GB 1g.5gb", 1.5, 0, 1.5}}},
	"carol": {groups: []string{"researchers"}, classes: []class{{"gpu", "gpu H100-80GB-HBM3", 40, 30, 0}}},
	"dave":  {groups: []string{}},
	"erin": {groups: []string{"researchers", "students"}, classes: []class{{"gpu", "gpu H100-80GB-HBM3", 10, 1, 0},
		{"mig", "mig A100-SXM4-40GB 3g.20gb", 3, 2.5, 0}}},
}

func (u fakeUser) window(scale float64, custom bool) map[string]any {
	var a, used, unknown float64
	var byClass []map[string]any
	for _, c := range u.classes {
		a, used, unknown = a+c.allocated*scale, used+c.used*scale, unknown+c.usedUnknown*scale
		byClass = append(byClass, map[string]any{"kind": c.kind, "class": c.class, "allocated": c.allocated, "used": c.used, "usedUnknown": c.usedUnknown})
	}
	w := map[string]any{"allocated": a, "used": used, "usedUnknown": unknown}
	if custom {
		w["from"], w["to"] = "2026-10-28T15:00:00Z", "2026-11-27T15:20:00Z"
		if byClass != nil {
			w["byClass"] = byClass
		}
	}
	return w
}

// fakeUsageAPI answers api/v1/users and api/v1/users/{name} as the usage API does (services/usage-api/openapi.yaml),
// in pages of pageLimit users, for the tokens admin-token (an admin) and bob-token (bob).
type fakeUsageAPI struct {
	pageLimit   int
	unavailable bool // the ledger cannot be reached: gpuHoursStatus "unavailable"
	customFails bool // a custom window answers 503

	mu      sync.Mutex
	asked   []string // users/{name} requests
	froms   []string
	listing int // users requests
}

func (f *fakeUsageAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	fail := func(status int, msg string) {
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]any{"status": status, "message": msg})
	}
	const prefix = "/services/gpu-usage/api/v1/"
	token := r.Header.Get("Authorization")
	if token != "token admin-token" && token != "token bob-token" {
		w.Header().Set("WWW-Authenticate", "token")
		fail(http.StatusUnauthorized, "authenticate with a Hub token")
		return
	}
	windows := func(u fakeUser, custom bool) (map[string]any, string) {
		if f.unavailable {
			return map[string]any{"today": nil, "7d": nil, "30d": nil}, "unavailable"
		}
		ws := map[string]any{"today": u.window(0.05, false), "7d": u.window(0.25, false), "30d": u.window(1, false)}
		if custom {
			ws["custom"] = u.window(1, true)
		}
		return ws, "ok"
	}
	switch name, one := strings.CutPrefix(r.URL.Path, prefix+"users/"); {
	case r.URL.Path == prefix+"users":
		if token != "token admin-token" {
			fail(http.StatusForbidden, "listing users needs an admin; read your own usage at api/v1/me")
			return
		}
		f.mu.Lock()
		f.listing++
		f.mu.Unlock()
		offset, _ := strconv.Atoi(r.URL.Query().Get("offset"))
		limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
		limit = min(limit, f.pageLimit)
		names := []string{"alice", "bob", "carol", "dave", "erin"}
		items := []map[string]any{}
		for _, n := range names[min(offset, len(names)):min(offset+limit, len(names))] {
			ws, status := windows(fakeUsers[n], false)
			item := map[string]any{"name": n, "groups": fakeUsers[n].groups, "servers": 0, "allocatedGPUs": 0, "usedGPUs": 0,
				"simulated": true, "stale": false, "gpuHours": ws, "gpuHoursStatus": status}
			if status != "ok" {
				item["gpuHoursReason"] = "GPU-hours are unavailable: the ledger database cannot be reached (retrying every 30 s); live numbers are current."
			}
			items = append(items, item)
		}
		var next any
		if offset+limit < len(names) {
			next = map[string]any{"offset": offset + limit, "limit": limit,
				"url": fmt.Sprintf("%susers?offset=%d&limit=%d", prefix, offset+limit, limit)}
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"items": items,
			"_pagination": map[string]any{"offset": offset, "limit": limit, "total": len(names), "next": next}})
	case one:
		f.mu.Lock()
		f.asked = append(f.asked, name)
		f.froms = append(f.froms, r.URL.Query().Get("from"))
		f.mu.Unlock()
		u, known := fakeUsers[name]
		switch {
		case token == "token bob-token" && name != "bob":
			fail(http.StatusForbidden, fmt.Sprintf("you may read only your own usage; %q is another user's", name))
			return
		case !known:
			fail(http.StatusNotFound, fmt.Sprintf("no user %q in the Hub", name))
			return
		case f.customFails:
			w.Header().Set("Retry-After", "30")
			fail(http.StatusServiceUnavailable, "the ledger cannot answer a custom window just now; retry in 30 s")
			return
		}
		ws, status := windows(u, true)
		_ = json.NewEncoder(w).Encode(map[string]any{"user": name, "groups": u.groups, "sampledAt": asOf, "intervalSeconds": 5,
			"simulated": true, "stale": false, "share": map[string]any{"allocatedGPUs": 0, "usedGPUs": 0, "memoryUsedBytes": 0, "memoryTotalBytes": 0},
			"servers": []any{}, "history": []any{}, "gpuHours": ws, "gpuHoursStatus": status, "notices": []any{}, "budget": nil, "idleCull": nil})
	default:
		fail(http.StatusNotFound, "no such endpoint")
	}
}

// run runs gpuhub report against the fake with a clock that moves step on every reading.
func run(t *testing.T, env map[string]string, step time.Duration, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	var mu sync.Mutex
	now := asOf.Add(-step)
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		now = now.Add(step)
		return now
	}
	code := Run(context.Background(), args, policycmd.Env{Stdout: &out, Stderr: &errOut,
		Getenv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }}, clock)
	return code, out.String(), errOut.String()
}

func TestReportGolden(t *testing.T) {
	fake := &fakeUsageAPI{pageLimit: 1000}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	env := map[string]string{"JUPYTERHUB_API_TOKEN": "admin-token", "GPUHUB_USAGE_URL": srv.URL + "/services/gpu-usage"}
	tests := map[string]struct {
		args       []string
		wantAsked  []string // users whose custom window the report reads (nil: none, the list answers)
		wantGolden string
	}{
		"by user":        {[]string{}, nil, "user.table"},
		"by user csv":    {[]string{"--format", "csv"}, nil, "user.csv"},
		"by user json":   {[]string{"--format=json"}, nil, "user.json"},
		"by user 7d":     {[]string{"--window", "7d"}, nil, "user-7d.table"},
		"by group":       {[]string{"--by", "group"}, nil, "group.table"},
		"by group csv":   {[]string{"--by", "group", "--format", "csv"}, nil, "group.csv"},
		"one group":      {[]string{"--by", "group", "--group", "students"}, nil, "group-students.table"},
		"by kind":        {[]string{"--by", "kind"}, []string{"alice", "bob", "carol", "erin"}, "kind.table"},
		"by kind json":   {[]string{"--by", "kind", "--format", "json"}, []string{"alice", "bob", "carol", "erin"}, "kind.json"},
		"students 24h":   {[]string{"--group", "students", "--window", "24h"}, []string{"alice", "bob", "erin"}, "students-24h.table"},
		"a long window":  {[]string{"--window", "90d", "--by", "kind", "--format", "csv"}, []string{"alice", "bob", "carol", "dave", "erin"}, "kind-90d.csv"},
		"no GPU-hours":   {[]string{"--group", "students", "--window", "24h", "--user", "dave"}, []string{"dave"}, "none.table"},
		"a user's token": {[]string{"--user", "bob", "--window", "30d"}, []string{"bob"}, "bob.table"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			fake.mu.Lock()
			fake.asked, fake.froms = nil, nil
			fake.mu.Unlock()
			e := env
			if strings.Contains(name, "user's token") {
				e = map[string]string{"JUPYTERHUB_API_TOKEN": "bob-token", "GPUHUB_USAGE_URL": srv.URL + "/services/gpu-usage/"}
			}
			code, out, errOut := run(t, e, 0, tc.args...)
			if code != 0 || errOut != "" {
				t.Fatalf("exit %d, stderr:\n%s", code, errOut)
			}
			golden.Check(t, tc.wantGolden, out)
			fake.mu.Lock()
			defer fake.mu.Unlock()
			asked := append([]string(nil), fake.asked...)
			slices.Sort(asked)
			if diff := cmp.Diff(tc.wantAsked, asked); diff != "" {
				t.Errorf("custom windows asked (-want +got):\n%s", diff)
			}
			for _, from := range fake.froms {
				if _, err := time.Parse(time.RFC3339, from); err != nil {
					t.Errorf("from=%q is not RFC 3339", from)
				}
			}
		})
	}
}

func TestReportPagesAndProgress(t *testing.T) {
	fake := &fakeUsageAPI{pageLimit: 2}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	env := map[string]string{"JUPYTERHUB_API_TOKEN": "admin-token"}
	// A clock that moves 700 ms a reading: the report takes seconds, and says how far it is.
	code, out, errOut := run(t, env, 700*time.Millisecond, "--usage-url", srv.URL+"/services/gpu-usage/", "--by", "kind")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if fake.listing != 3 {
		t.Errorf("read %d pages of users, want 3 (5 users, 2 a page)", fake.listing)
	}
	if !strings.Contains(errOut, "gpuhub report: read 2 of 5 users...") || !strings.Contains(errOut, "gpuhub report: read the GPU-hours of") {
		t.Errorf("no progress on stderr:\n%s", errOut)
	}
	if !strings.Contains(out, "TOTAL") {
		t.Errorf("no report:\n%s", out)
	}
	// A quick report says nothing on stderr.
	if code, _, errOut := run(t, env, 0, "--usage-url", srv.URL+"/services/gpu-usage/", "--by", "kind"); code != 0 || errOut != "" {
		t.Errorf("a quick report: exit %d, stderr %q", code, errOut)
	}
}

func TestReportErrors(t *testing.T) {
	srv := httptest.NewServer(&fakeUsageAPI{pageLimit: 1000})
	defer srv.Close()
	down := httptest.NewServer(&fakeUsageAPI{pageLimit: 1000, unavailable: true})
	defer down.Close()
	busy := httptest.NewServer(&fakeUsageAPI{pageLimit: 1000, customFails: true})
	defer busy.Close()
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close() // nothing listens there any more
	notAPI := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("<html>JupyterHub</html>"))
	}))
	defer notAPI.Close()
	url := srv.URL + "/services/gpu-usage/"
	admin := map[string]string{"JUPYTERHUB_API_TOKEN": "admin-token"}
	dir := t.TempDir()
	tokenFile, emptyFile := filepath.Join(dir, "token"), filepath.Join(dir, "empty")
	if err := os.WriteFile(tokenFile, []byte("admin-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(emptyFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		env      map[string]string
		args     []string
		wantCode int
		wantErr  string
	}{
		"token file": {nil, []string{"--usage-url", url, "--token-file", tokenFile}, 0, ""},
		"no token":   {nil, []string{"--usage-url", url}, 1, "no Hub token: set JUPYTERHUB_API_TOKEN to a Hub admin's API token, or give --token-file FILE"},
		"token file missing": {nil, []string{"--usage-url", url, "--token-file", filepath.Join(dir, "nothing")}, 1,
			"--token-file: open " + filepath.Join(dir, "nothing")},
		"token file empty": {nil, []string{"--usage-url", url, "--token-file", emptyFile}, 1, "is empty: write a Hub admin's API token into it"},
		"unknown token": {map[string]string{"JUPYTERHUB_API_TOKEN": "old-token"}, []string{"--usage-url", url}, 1,
			"the Hub does not know the token in JUPYTERHUB_API_TOKEN: make a new one on the Hub's token page"},
		"a user's token for everyone": {map[string]string{"JUPYTERHUB_API_TOKEN": "bob-token"}, []string{"--usage-url", url}, 1,
			"(listing users needs an admin; read your own usage at api/v1/me): a report of other users needs a Hub admin's token; without one, --user YOUR-NAME reports your own GPU-hours"},
		"a user's token for another": {map[string]string{"JUPYTERHUB_API_TOKEN": "bob-token"}, []string{"--usage-url", url, "--user", "carol"}, 1,
			"needs a Hub admin's token"},
		"unknown user":  {admin, []string{"--usage-url", url, "--user", "zoe"}, 1, `no such user: no user "zoe" in the Hub: check the name`},
		"unknown group": {admin, []string{"--usage-url", url, "--group", "Students"}, 1, `no user of the usage API is in Hub group "Students"`},
		"wrong path": {admin, []string{"--usage-url", srv.URL + "/services/gpu-quota/"}, 1,
			"no usage API at " + srv.URL + "/services/gpu-quota/ (404 for api/v1/users): check --usage-url, the usage API's URL with its prefix"},
		"nothing there": {admin, []string{"--usage-url", gone.URL}, 1, "the usage API at " + gone.URL + "/ does not answer"},
		"not the API":   {admin, []string{"--usage-url", notAPI.URL}, 1, "is not the usage API's"},
		"bad URL":       {admin, []string{"--usage-url", "hub example org"}, 1, "check --usage-url"},
		"ledger down": {admin, []string{"--usage-url", down.URL + "/services/gpu-usage"}, 1,
			"the usage API cannot read its GPU-hours ledger just now (GPU-hours are unavailable: the ledger database cannot be reached"},
		"custom window 503": {admin, []string{"--usage-url", busy.URL + "/services/gpu-usage", "--window", "24h"}, 1,
			"the usage API cannot answer just now (the ledger cannot answer a custom window just now; retry in 30 s): try again in a minute"},
		"no URL":         {admin, nil, 2, "give --usage-url URL (or set GPUHUB_USAGE_URL)"},
		"bad window":     {admin, []string{"--usage-url", url, "--window", "30"}, 2, `--window "30": invalid duration "30": a unit is missing`},
		"part of a hour": {admin, []string{"--usage-url", url, "--window", "90m"}, 2, "write whole hours from 1h to 366d"},
		"too long":       {admin, []string{"--usage-url", url, "--window", "400d"}, 2, "write whole hours from 1h to 366d"},
		"bad by":         {admin, []string{"--usage-url", url, "--by", "users"}, 2, `--by "users": write --by user, --by group or --by kind`},
		"bad format":     {admin, []string{"--usage-url", url, "--format", "xls"}, 2, `--format "xls": write --format table, csv or json`},
		"positional":     {admin, []string{"--usage-url", url, "students"}, 2, `unexpected "students"`},
		"unknown flag":   {admin, []string{"--usage-url", url, "--windw", "7d"}, 2, "flag provided but not defined: -windw"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			code, out, errOut := run(t, tc.env, 0, tc.args...)
			if code != tc.wantCode || !strings.Contains(errOut, tc.wantErr) {
				t.Errorf("exit %d (want %d), stderr:\n%s\nwant it to contain %q", code, tc.wantCode, errOut, tc.wantErr)
			}
			if code != 0 && out != "" {
				t.Errorf("a failed report printed:\n%s", out)
			}
			if strings.Contains(errOut, "admin-token") || strings.Contains(errOut, "bob-token") {
				t.Errorf("a token in the output:\n%s", errOut)
			}
		})
	}
	if code, out, _ := run(t, nil, 0, "--help"); code != 0 || !strings.HasPrefix(out, "usage:") {
		t.Errorf("--help: exit %d, stdout %q", code, out)
	}
}
