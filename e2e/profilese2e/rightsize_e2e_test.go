//go:build e2e

package profilese2e

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuhub/gpuhub/services/usage-api/usagekit"
)

// alice's recorded history (seedRightSize): her server "lab" on a MIG 3g.20gb slice of an A100 on each of the
// last three days, 2 h held and 1 h busy a day (720 busy samples of 5 s), never above 3 GiB of GPU memory and
// 25 % of the slice (p95 while busy, 11 % of the GPU). A MIG 1g.5gb (4.75 GiB, 1/7 of the GPU) holds that with
// the usage API's 20 % margin; the 3g.20gb is the only larger kind of the A100 on e2e/topology.yaml.
const (
	adviceServer = "lab"
	heldClass    = "mig A100-SXM4-40GB 3g.20gb"
	heldSlug     = "mig-a100-sxm4-40gb-3g-20gb"
	advisedClass = "mig A100-SXM4-40GB 1g.5gb"
	advisedSlug  = "mig-a100-sxm4-40gb-1g-5gb"
	seededDays   = 3
	seededPeak   = 3 << 30
)

// seedRightSize writes alice's history into the ledger at dsn through the usage API's own store (usagekit), as
// its recorder would have written it: advice needs an hour of busy time and 100 busy samples, which a fresh
// local cluster has not had. The days are marked simulated, as the local cluster's GPU use is.
func seedRightSize(ctx context.Context, dsn string, now time.Time) error {
	st, err := usagekit.OpenLedger(ctx, dsn)
	if err != nil {
		return fmt.Errorf("seed right-size history: %w", err)
	}
	defer func() { _ = st.Close() }()
	y, m, d := now.UTC().Date()
	today := time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
	const memTotal = 19968 << 20 // the 3g.20gb's memory (topology.yaml)
	var days []usagekit.ProfileDay
	for i := 1; i <= seededDays; i++ {
		day := today.AddDate(0, 0, -i)
		mem, sm := make([]uint32, usagekit.MemoryBins), make([]uint32, usagekit.SMBins)
		mem[seededPeak*100/memTotal] = 1440 // every 5 s sample of 2 h held, in the bin of 3 GiB
		sm[12], sm[24] = 600, 120           // busy samples: p95 in the 24-25 % bin
		days = append(days, usagekit.ProfileDay{
			User: "alice", Server: adviceServer, Class: heldClass, Day: day, Kind: "mig", Product: "A100-SXM4-40GB",
			MemoryTotalBytes: memTotal, HeldGPUs: 3.0 / 7, Scale: 3.0 / 7,
			First: day.Add(9 * time.Hour), Last: day.Add(11 * time.Hour),
			HeldS: 7200, BusyS: 3600, BusySamples: 720, PeakMemoryBytes: seededPeak, Simulated: true,
			MemoryHist: mem, SMHist: sm,
		})
	}
	if err := st.PutProfiles(ctx, days, today.Add(-usagekit.Retention)); err != nil {
		return fmt.Errorf("seed right-size history: %w", err)
	}
	return nil
}

// The usage API's right-size answers (services/internal/contract), as far as this test reads them.
type (
	rightSizeKind struct {
		Class        string  `json:"class"`
		Description  string  `json:"description"`
		SavedPerHour float64 `json:"savedPerHour"`
		FreeNow      *int64  `json:"freeNow"`
	}
	rightSize struct {
		Server     string          `json:"server"`
		Verdict    string          `json:"verdict"`
		Held       rightSizeKind   `json:"held"`
		Candidates []rightSizeKind `json:"candidates"`
		Simulated  bool            `json:"simulated"`
		Evidence   struct {
			PeakMemoryBytes  float64 `json:"peakMemoryBytes"`
			P95SMUtilPercent float64 `json:"p95SMUtilPercent"`
			BusySeconds      float64 `json:"busySeconds"`
		} `json:"evidence"`
	}
	savingsRow struct {
		Key              string  `json:"key"`
		SaveableGPUHours float64 `json:"saveableGPUHours"`
		HeldGPUHours     float64 `json:"heldGPUHours"`
		Servers          int     `json:"servers"`
		Smaller          int     `json:"smaller"`
		Simulated        int     `json:"simulated"`
		Stale            int     `json:"stale"`
	}
	savings struct {
		Period string       `json:"period"`
		By     string       `json:"by"`
		Rows   []savingsRow `json:"rows"`
	}
)

// TestRightSizeAdvice (issue 38): alice's recorded use of a MIG 3g.20gb fits a 1g.5gb. Her spawn form for that
// server marks the 1g.5gb; once the server runs, the GPU panel in her JupyterLab shows the advice with its
// evidence and how many 1g.5gb are free now; the admin view's Right-size page and its CSV say what the JSON API
// says.
func TestRightSizeAdvice(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	mine := adviceOf(t, "alice")
	if mine.Verdict != "smaller" || len(mine.Candidates) == 0 || mine.Candidates[0].Class != advisedClass {
		t.Fatalf("the usage API's advice for alice/%s: %+v, want smaller, %s first", adviceServer, mine, advisedClass)
	}
	t.Logf("usage API: alice/%s on %s: %s, first %s (%s, saves %.2f GPU-hours per hour held)", adviceServer,
		mine.Held.Class, mine.Verdict, mine.Candidates[0].Class, mine.Candidates[0].Description, mine.Candidates[0].SavedPerHour)

	// The spawn form. gpu-profiles fetches advice in the background (a form drawn before that has no mark) and
	// the glue keeps a user's form for 5 s: wait for gpu-profiles' answer to carry it, then look in Chromium.
	const mark = "Recommended for you: your server \"" + adviceServer + "\" used at most 3.0 GiB of GPU memory"
	marked := func() string {
		for _, p := range askProfilesFor(t, "alice", adviceServer, []string{"students"}) {
			if strings.Contains(p.Description, "Recommended for you") {
				return p.Slug
			}
		}
		return ""
	}
	deadline := time.Now().Add(30 * time.Second)
	for marked() == "" && time.Now().Before(deadline) {
		time.Sleep(time.Second)
	}
	var form formResult
	for try := 0; ; try++ {
		form = openForm(t, formRun{user: "alice", server: adviceServer, screenshot: "spawn-form-recommended.png"})
		if c := form.choice(advisedSlug); (c != nil && strings.Contains(c.Description, mark)) || try == 3 {
			break
		}
		time.Sleep(6 * time.Second) // the glue's per-user cache
	}
	var recommended []string
	for _, c := range form.Choices {
		if strings.Contains(c.Description, "Recommended for you") {
			recommended = append(recommended, c.Slug)
		}
	}
	if d := cmp.Diff([]string{advisedSlug}, recommended); d != "" {
		t.Fatalf("choices marked recommended on alice's form for %q (-want +got):\n%s\nchoices: %+v", adviceServer, d, form.Choices)
	}
	if c := form.choice(advisedSlug); !strings.Contains(c.Description, mark) {
		t.Errorf("the 1g.5gb's description %q lacks %q", c.Description, mark)
	} else {
		t.Logf("spawn form of alice/%s in Chromium: %s (%s) says %q", adviceServer, c.Name, c.Free, c.Description)
	}

	// The panel, in the JupyterLab of that server, now running on what it held.
	hub().StartReady(ctx, t, "alice", adviceServer, heldSlug)
	defer hub().Stop(t, "alice", adviceServer)
	shown := panelRightSize(t, "alice", adviceServer)
	var here *panelAdvice
	for i := range shown {
		if shown[i].Current && shown[i].Verdict == "smaller" {
			here = &shown[i]
		}
	}
	if here == nil {
		t.Fatalf("the panel shows no advice for this server: %+v", shown)
	}
	mine = adviceOf(t, "alice")
	c := mine.Candidates[0]
	if c.FreeNow == nil {
		t.Fatalf("the usage API's first candidate has no freeNow: %+v", c)
	}
	free := clusterFree(ctx, t)[advisedSlug][0]
	if *c.FreeNow != free {
		t.Errorf("the usage API says %v %s free now; the cluster has %d", *c.FreeNow, advisedClass, free)
	}
	wantHead := fmt.Sprintf("%s would have done, %d free now: it saves ", c.Description, free)
	if !strings.HasPrefix(here.Headline, wantHead) {
		t.Errorf("the panel's headline %q, want it to start %q", here.Headline, wantHead)
	}
	wantEvidence := fmt.Sprintf("This server used at most 3 GiB of GPU memory and %.0f %% of %s (p95 while busy) over ",
		mine.Evidence.P95SMUtilPercent, mine.Held.Description)
	if !strings.HasPrefix(here.Evidence, wantEvidence) {
		t.Errorf("the panel's evidence %q, want it to start %q", here.Evidence, wantEvidence)
	}
	if !here.Simulated {
		t.Error("the panel does not say the advice is from simulated use")
	}
	t.Logf("GPU panel of alice/%s in Chromium: %q; %q", adviceServer, here.Headline, here.Evidence)

	// The admin view's Right-size page and its CSV against the JSON API. The savings come from a read of
	// everyone's profiles shared for up to 10 minutes: the JSON is read before and after the page, and a pair
	// that straddles a new read is tried again.
	const q = "right-size?period=7d&by=user"
	// gpu-profiles reads advice only (the usage API's --advice-readers): everyone's savings are refused to it.
	if code := statusOf(t, usageURL+q, profilesToken); code != http.StatusForbidden {
		t.Errorf("GET %s with gpu-profiles' token: %d, want 403 (an advice reader reads nothing else of other users)", q, code)
	}
	for try := 1; ; try++ {
		before := savingsOf(t, q)
		page, body := visitRightSizePage(t, q)
		after := savingsOf(t, q)
		if !cmp.Equal(before, after) && try < 3 {
			t.Logf("the savings were read again during the visit; again")
			continue
		}
		compareSavings(t, after, page, body)
		for _, r := range after.Rows {
			if r.Key == "alice" {
				t.Logf("admin view Right-size (period 7d, by user) and its CSV agree with the JSON API on %d rows; alice: %.2f GPU-hours saveable of %.2f held, %d of %d servers advised smaller",
					len(after.Rows), r.SaveableGPUHours, r.HeldGPUHours, r.Smaller, r.Servers)
			}
		}
		break
	}
}

// adviceOf is the usage API's advice for user's server adviceServer on heldClass (period 7d), read with
// gpu-profiles' token as gpu-profiles reads it.
func adviceOf(t *testing.T, user string) rightSize {
	t.Helper()
	var out struct {
		Servers []rightSize `json:"servers"`
	}
	getJSON(t, usageURL+"users/"+user+"/right-size", profilesToken, &out)
	for _, a := range out.Servers {
		if a.Server == adviceServer && a.Held.Class == heldClass {
			return a
		}
	}
	t.Fatalf("the usage API has no advice for %s/%s on %s: %+v", user, adviceServer, heldClass, out.Servers)
	return rightSize{}
}

// savingsOf is the JSON API's GET right-size?..., read with gpu-quota's token (a reader service may read it, as
// an admin may; gpu-profiles, an advice reader, may not).
func savingsOf(t *testing.T, query string) savings {
	t.Helper()
	var s savings
	getJSON(t, usageURL+query, quotaToken, &s)
	return s
}

// statusOf is the status of GET url with token.
func statusOf(t *testing.T, url, token string) int {
	t.Helper()
	resp := get(t, url, token)
	_ = resp.Body.Close()
	return resp.StatusCode
}

func getJSON(t *testing.T, url, token string, v any) {
	t.Helper()
	resp := get(t, url, token)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

// get is GET url with token, bounded to 10 s (the body too); the caller closes the body.
func get(t *testing.T, url, token string) *http.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	req.Header.Set("Authorization", "token "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// compareSavings checks the admin page's table (two decimals) and the CSV (six) against the JSON rows.
func compareSavings(t *testing.T, api savings, page [][]string, body string) {
	t.Helper()
	var wantPage, wantCSV [][]string
	for _, r := range api.Rows {
		wantPage = append(wantPage, []string{r.Key, fmt.Sprintf("%.2f", r.SaveableGPUHours), fmt.Sprintf("%.2f", r.HeldGPUHours),
			strconv.Itoa(r.Servers), strconv.Itoa(r.Smaller)})
		wantCSV = append(wantCSV, []string{r.Key, strconv.FormatFloat(r.SaveableGPUHours, 'f', 6, 64),
			strconv.FormatFloat(r.HeldGPUHours, 'f', 6, 64), strconv.Itoa(r.Servers), strconv.Itoa(r.Smaller),
			strconv.Itoa(r.Simulated), strconv.Itoa(r.Stale)})
	}
	if d := cmp.Diff(wantPage, page); d != "" {
		t.Errorf("the admin view's Right-size table against the JSON API (-api +page):\n%s", d)
	}
	recs, err := csv.NewReader(strings.NewReader(body)).ReadAll()
	if err != nil || len(recs) == 0 {
		t.Fatalf("the CSV: %v\n%s", err, body)
	}
	if want := []string{"period", "from", "to", "user", "saveable_gpu_hours", "held_gpu_hours", "servers", "advised_smaller", "simulated", "stale"}; !cmp.Equal(want, recs[0]) {
		t.Fatalf("the CSV's header %v, want %v", recs[0], want)
	}
	var got [][]string
	for _, r := range recs[1:] {
		if r[0] != api.Period {
			t.Errorf("a CSV row of period %q, want %q", r[0], api.Period)
		}
		got = append(got, r[3:])
	}
	if d := cmp.Diff(wantCSV, got); d != "" {
		t.Errorf("the admin view's CSV against the JSON API (-api +csv):\n%s", d)
	}
	if !strings.Contains(fmt.Sprint(wantPage), "alice") {
		t.Errorf("no row for alice in %v", wantPage)
	}
}

// visitRightSizePage runs e2e/browser/admin-view.mjs as the Hub admin: the Services menu, the Right-size page
// for query and its CSV. It returns the table's body rows and the CSV.
func visitRightSizePage(t *testing.T, query string) ([][]string, string) {
	t.Helper()
	artifacts, _ := filepath.Abs(filepath.Join("..", "artifacts"))
	script, _ := filepath.Abs(filepath.Join("..", "browser", "admin-view.mjs"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", script)
	cmd.Env = append(os.Environ(), "HUB_URL="+st.HubURL(), "HUB_USER=admin", "HUB_PASSWORD="+password, "GPUHUB_ARTIFACTS="+artifacts,
		"PAGES="+query, "CSV="+query+"&format=csv", "SHOTS=admin-view-rightsize")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("admin view in Chromium: %v\n%s", err, out)
	}
	var page struct {
		Status int `json:"status"`
		Tables []struct {
			Rows [][]string `json:"rows"`
		} `json:"tables"`
	}
	var body string
	for _, line := range strings.Split(string(out), "\n") {
		if rest, ok := strings.CutPrefix(line, "page: "); ok {
			if err := json.Unmarshal([]byte(rest), &page); err != nil {
				t.Fatal(err)
			}
		}
		if rest, ok := strings.CutPrefix(line, "csv: "); ok {
			if err := json.Unmarshal([]byte(rest), &body); err != nil {
				t.Fatal(err)
			}
		}
	}
	if page.Status != http.StatusOK || len(page.Tables) != 1 {
		t.Fatalf("the Right-size page: status %d, %d tables\n%s", page.Status, len(page.Tables), out)
	}
	// Shown as e2e/artifacts/admin-view-rightsize-0.png.
	return page.Tables[0].Rows, body
}

// panelAdvice is one advice of the panel's "Right size" section (e2e/browser/panel-rightsize.mjs).
type panelAdvice struct {
	Server    string   `json:"server"`
	Verdict   string   `json:"verdict"`
	Current   bool     `json:"current"`
	Headline  string   `json:"headline"`
	Evidence  string   `json:"evidence"`
	Simulated bool     `json:"simulated"`
	Caveats   []string `json:"caveats"`
}

// panelRightSize opens user's JupyterLab on server in Chromium and returns the advice its GPU panel shows, once
// it shows a "smaller" one for this server; the screenshot is e2e/artifacts/panel-rightsize-<user>.png.
func panelRightSize(t *testing.T, user, server string) []panelAdvice {
	t.Helper()
	artifacts, _ := filepath.Abs(filepath.Join("..", "artifacts"))
	script, _ := filepath.Abs(filepath.Join("..", "browser", "panel-rightsize.mjs"))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", script)
	cmd.Env = append(os.Environ(), "HUB_URL="+st.HubURL(), "HUB_USER="+user, "HUB_PASSWORD="+password, "HUB_SERVER="+server,
		"GPUHUB_ARTIFACTS="+artifacts, "EXPECT_VERDICT=smaller")
	out, err := cmd.CombinedOutput()
	var res struct {
		OK     bool          `json:"ok"`
		Advice []panelAdvice `json:"advice"`
	}
	if lines := regexp.MustCompile(`(?m)^\{.*"advice".*\}$`).FindAll(out, -1); len(lines) > 0 {
		_ = json.Unmarshal(lines[len(lines)-1], &res)
	}
	if err != nil || !res.OK {
		t.Fatalf("the GPU panel of %s/%s in Chromium: %v\n%s", user, server, err, out)
	}
	return res.Advice
}
