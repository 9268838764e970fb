//go:build integration

package profiles_test

import (
	"crypto/subtle"
	"encoding/json"
	"html"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuhub/gpuhub/e2e/gpuhubstack"
	"github.com/gpuhub/gpuhub/e2e/hubint/hubtest"
	"github.com/gpuhub/gpuhub/e2e/internal/hubproc"
)

// The waitlist on the spawn form (issue 13), on the Hub "waiting": z2jh's spawn settings, GPUHUB_WAITLIST=1 and
// a fake gpu-quota that answers as gpu-quota does with --waitlist. The glue and the real gpu-profiles are
// those of the other tests; carol's pods hold both H100s, so the single-H100 choice is exhausted.

// Words of the fake gpu-quota (the real one's are in services/gpu-quota/internal/admit/words.go).
const (
	queuedMessage    = "No GPU of this kind is free right now. You are number 2 of 3 waiting for one."
	autoStartMessage = " Your server starts by itself when your turn comes."
	heldMessage      = "The free one is held for the next person on the waitlist. You would be number 2 in line: choose join the waitlist on the spawn form to keep a place."
)

// admitRequest is the body of gpu-quota's POST api/v1/admit as the glue sends it.
type admitRequest struct {
	User        string          `json:"user"`
	Server      string          `json:"server"`
	Profile     string          `json:"profile"`
	UserOptions map[string]any  `json:"userOptions"`
	Waitlist    *waitlistChoice `json:"-"`
}

type waitlistChoice struct{ Join, AutoStart bool }

// choice is what the spawn asks of the waitlist, read as the form and these tests write it (true); the real
// gpu-quota's reading of every spelling is services/internal/contract's WaitlistChoiceFrom.
func (r admitRequest) choice() *waitlistChoice {
	autoStart := r.UserOptions["gpuhub_autostart"] == true
	if !autoStart && r.UserOptions["gpuhub_waitlist"] != true {
		return nil
	}
	return &waitlistChoice{Join: true, AutoStart: autoStart}
}

// fakeQuota queues every request that asks to join (number 2 of 3) and refuses every other one as held for
// those in line (reason waitlist): a unit gpu-profiles counts free may be held. It records what it was asked.
type fakeQuota struct {
	srv   *httptest.Server
	token string
	mu    sync.Mutex
	reqs  []admitRequest
}

func newFakeQuota() *fakeQuota {
	q := &fakeQuota{token: gpuhubstack.NewToken()}
	q.srv = httptest.NewServer(http.HandlerFunc(q.serve))
	return q
}

func (q *fakeQuota) Close() { q.srv.Close() }

// service registers the fake as the Hub's gpu-quota (the glue finds its url and token there).
func (q *fakeQuota) service() hubproc.Service {
	return hubproc.Service{Name: gpuhubstack.QuotaServiceName, Token: q.token, URL: q.srv.URL, Scopes: gpuhubstack.QuotaScopes}
}

func (q *fakeQuota) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/services/gpu-quota/api/v1/admit" {
		http.NotFound(w, r)
		return
	}
	if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte("token "+q.token)) != 1 {
		http.Error(w, `{"message":"not gpu-quota's token"}`, http.StatusUnauthorized)
		return
	}
	var req admitRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, `{"message":"bad body"}`, http.StatusBadRequest)
		return
	}
	req.Waitlist = req.choice()
	q.mu.Lock()
	q.reqs = append(q.reqs, req)
	q.mu.Unlock()
	answer := map[string]any{"allow": false, "reason": "waitlist", "message": heldMessage, "decisionId": "fake", "onUnavailable": "open",
		"joinOffered": true, "countedPod": true}
	if req.Waitlist != nil && req.Waitlist.Join {
		delete(answer, "joinOffered")
		msg := queuedMessage
		if req.Waitlist.AutoStart {
			msg += autoStartMessage
		}
		answer["reason"], answer["message"] = "none_free", msg
		answer["waitlist"] = map[string]any{"position": 2, "waiting": 3, "message": strings.TrimPrefix(msg, "No GPU of this kind is free right now. ")}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(answer)
}

// requests returns what the fake was asked since n requests.
func (q *fakeQuota) requests(n int) []admitRequest {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]admitRequest(nil), q.reqs[n:]...)
}

func (q *fakeQuota) count() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.reqs)
}

// waitlistControls are the join checkboxes and join-only markers of a form page, by slug.
type waitlistControls struct {
	Join, AutoStart, JoinOnly []string
}

var controlRe = regexp.MustCompile(`<input type="(checkbox|hidden)" name="(gpuhub-waitlist|gpuhub-autostart|gpuhub-join-only)"(?: id="([^"]*)")? value="([^"]*)"([^>]*)>`)

// controls reads the waitlist controls of page and checks what makes them usable with a keyboard and a
// screen reader: each checkbox has its label and a description that exists.
func controls(t *testing.T, page string) waitlistControls {
	t.Helper()
	var c waitlistControls
	for _, m := range controlRe.FindAllStringSubmatch(page, -1) {
		slug := html.UnescapeString(m[4])
		switch m[2] {
		case "gpuhub-waitlist":
			c.Join = append(c.Join, slug)
		case "gpuhub-autostart":
			c.AutoStart = append(c.AutoStart, slug)
		case "gpuhub-join-only":
			c.JoinOnly = append(c.JoinOnly, slug)
			continue
		}
		id := m[3]
		if !strings.Contains(page, `<label for="`+id+`">`) {
			t.Errorf("checkbox %s (%s) has no label", id, m[2])
		}
		for _, ref := range describedBy(m[5]) {
			if !strings.Contains(page, `id="`+ref+`"`) {
				t.Errorf("checkbox %s is described by a missing element %s", id, ref)
			}
		}
	}
	return c
}

func describedBy(attrs string) []string {
	m := regexp.MustCompile(`aria-describedby="([^"]*)"`).FindStringSubmatch(attrs)
	if m == nil {
		return nil
	}
	return strings.Fields(m[1])
}

// TestWaitlistForm: with the waitlist on, bob's form shows the exhausted H100 with its "none free" reason,
// selectable for joining only: "Join the waitlist" and "Start my server automatically when my turn comes" for
// it alone, each labelled and described. Without it (the Hub "z2jh"), the form has no waitlist at all.
func TestWaitlistForm(t *testing.T) {
	want := waiting.askProfiles(t, "bob", []string{"students"})
	b := waiting.Login(t, "bob")
	code, page := b.Get(t, "hub/spawn")
	if code != http.StatusOK {
		t.Fatalf("GET /hub/spawn: %d\n%s", code, page)
	}
	got := parseForm(t, page)
	if len(got) != len(want.Profiles) {
		t.Fatalf("form has %d choices, gpu-profiles %d", len(got), len(want.Profiles))
	}
	var exhausted []string // gpu-profiles' GPU choices with none free: what one can wait in line for
	for i, p := range want.Profiles {
		c := got[i]
		g := p.Gpuhub
		joinable := g != nil && g.Kind != "cpu" && g.Kind != "static" && !g.Available && g.Reason == "none_free"
		if c.Disabled != (g != nil && !g.Available && !joinable) {
			t.Errorf("%s: disabled=%v; with the waitlist only choices that waiting cannot help are (%+v)", p.Slug, c.Disabled, g)
		}
		if !joinable {
			continue
		}
		exhausted = append(exhausted, p.Slug)
		attrs := regexp.MustCompile(`id="` + c.ID + `" value="[^"]*"([^>]*)>`).FindStringSubmatch(page)[1]
		refs := describedBy(attrs)
		if diff := cmp.Diff([]string{c.ID + "-desc", c.ID + "-reason", c.ID + "-join-note"}, refs); diff != "" {
			t.Errorf("%s: aria-describedby (-want +got):\n%s", p.Slug, diff)
		}
		for _, ref := range refs {
			if !strings.Contains(page, `id="`+ref+`"`) {
				t.Errorf("%s is described by a missing element %s", p.Slug, ref)
			}
		}
		if !strings.Contains(page, `id="`+c.ID+`-reason">`+html.EscapeString(g.ReasonText)+`</p>`) {
			t.Errorf("%s does not show gpu-profiles' reason %q", p.Slug, g.ReasonText)
		}
		if strings.Contains(attrs, " checked") {
			t.Errorf("%s, which can only be joined, is preselected", p.Slug)
		}
	}
	if h100 := waiting.h100Slug(t, "bob", []string{"students"}); !slices.Contains(exhausted, h100) {
		t.Errorf("the H100 (%s) is not among the choices to wait for: %v", h100, exhausted)
	}
	if diff := cmp.Diff(waitlistControls{Join: exhausted, AutoStart: exhausted, JoinOnly: exhausted}, controls(t, page)); diff != "" {
		t.Errorf("waitlist controls (-want +got):\n%s", diff)
	}
	for _, label := range []string{"Join the waitlist", "Start my server automatically when my turn comes"} {
		if !strings.Contains(page, ">"+label+"</label>") {
			t.Errorf("no label %q on the form", label)
		}
	}
	checkEscaped(t, page)
	t.Logf("jupyterhub %s (%s): waitlist offered on %v", waiting.Proc.Version(), waiting.Name, exhausted)

	_, off := z2jh.Login(t, "bob").Get(t, "hub/spawn")
	if strings.Contains(off, "gpuhub-waitlist") || strings.Contains(off, "gpuhub-join-only") {
		t.Errorf("the form of a Hub without GPUHUB_WAITLIST has waitlist controls")
	}
}

// TestWaitlistJoinFromForm: bob picks the exhausted H100 and ticks both boxes. The glue lets the start through
// to gpu-quota with the choice and his options (gpu-quota starts the server with them when his turn comes), and
// gpu-quota's refusal with his place in line is on the spawn-pending page within 5 s. No pod.
func TestWaitlistJoinFromForm(t *testing.T) {
	h100 := waiting.h100Slug(t, "bob", []string{"students"})
	before := waiting.quota.count()
	b := waiting.Login(t, "bob")
	_, form := b.Get(t, "hub/spawn")
	start := time.Now()
	code, page, location := b.Post(t, hubtest.SpawnAction(t, form), url.Values{
		"profile": {h100}, "gpuhub-waitlist": {h100}, "gpuhub-autostart": {h100}, "gpuhub-join-only": {h100},
	})
	if code != http.StatusFound || !strings.Contains(location, "spawn-pending/bob") {
		t.Fatalf("POST /hub/spawn = %d to %q, want 302 to spawn-pending:\n%s", code, location, page)
	}
	want := queuedMessage + autoStartMessage
	for !strings.Contains(html.UnescapeString(page), want) {
		if time.Since(start) > seen {
			t.Fatalf("spawn-pending page (%d) without gpu-quota's place in line %s after asking:\n%s", code, seen, page)
		}
		time.Sleep(100 * time.Millisecond)
		code, page = b.Get(t, location)
	}
	t.Logf("jupyterhub %s (%s): joined from the form, on the page after %s: %q", waiting.Proc.Version(), waiting.Name, time.Since(start).Round(time.Millisecond), want)
	reqs := waiting.quota.requests(before)
	if len(reqs) != 1 {
		t.Fatalf("gpu-quota was asked %d times, want once: %+v", len(reqs), reqs)
	}
	got := reqs[0]
	if got.User != "bob" || got.Profile != h100 || got.Waitlist == nil || !got.Waitlist.Join || !got.Waitlist.AutoStart {
		t.Errorf("admission %+v (waitlist %+v), want bob's %s joining with autoStart", got, got.Waitlist, h100)
	}
	wantOptions := map[string]any{"profile": h100, "gpuhub_waitlist": true, "gpuhub_autostart": true}
	if diff := cmp.Diff(wantOptions, got.UserOptions); diff != "" {
		t.Errorf("userOptions sent to gpu-quota (-want +got):\n%s", diff)
	}
	waiting.NoServerNoPod(t, "bob")
}

// TestWaitlistPickedWithoutJoin: the exhausted H100 picked without ticking "Join the waitlist" comes back on the
// form with what to do; nothing is started and gpu-quota is not asked.
func TestWaitlistPickedWithoutJoin(t *testing.T) {
	h100 := waiting.h100Slug(t, "bob", []string{"students"})
	before := waiting.quota.count()
	b := waiting.Login(t, "bob")
	_, form := b.Get(t, "hub/spawn")
	code, page, _ := b.Post(t, hubtest.SpawnAction(t, form), url.Values{"profile": {h100}, "gpuhub-join-only": {h100}})
	if code != http.StatusBadRequest {
		t.Fatalf("POST /hub/spawn = %d, want 400 and the form with what to do:\n%s", code, page)
	}
	if msg := errorMessage(page); !strings.Contains(msg, `Tick "Join the waitlist"`) {
		t.Errorf("form message %q does not say to tick %q", msg, "Join the waitlist")
	}
	if len(parseForm(t, page)) == 0 {
		t.Errorf("the form is not shown again")
	}
	if n := waiting.quota.count() - before; n != 0 {
		t.Errorf("gpu-quota was asked %d times", n)
	}
	waiting.NoServerNoPod(t, "bob")
}

// TestWaitlistAPIJoinKeepsHubRunning: REST spawns asking to join (user_options gpuhub_waitlist) get gpu-quota's
// place in line in the progress stream; six in a row with consecutive_failure_limit 5 leave the Hub serving (5.5
// counts every failed spawn; the glue takes its refusals back out of the count).
func TestWaitlistAPIJoinKeepsHubRunning(t *testing.T) {
	ctx := hubtest.CtxT(t, 2*time.Minute)
	h100 := waiting.h100Slug(t, "dave", []string{})
	tok := waiting.UserToken(t, "dave")
	before := waiting.quota.count()
	for i := range 6 {
		code, body, err := waiting.StartServerWith(ctx, tok, "dave", "", map[string]any{"profile": h100, "gpuhub_waitlist": true})
		if err != nil {
			t.Fatal(err)
		}
		if !answered(code) {
			t.Fatalf("spawn %d: POST dave's server with slow_spawn_timeout 0: %d %s, want 202 (or 201)", i+1, code, body)
		}
		ev, all, err := waiting.FailedEvent(ctx, tok, "dave")
		if err != nil {
			t.Fatalf("%v (events %+v)", err, all)
		}
		if msg := strings.TrimPrefix(ev.Message, "Spawn failed: "); msg != queuedMessage {
			t.Errorf("spawn %d: message %q, want gpu-quota's %q", i+1, msg, queuedMessage)
		}
		if err := waiting.WaitStopped(ctx, "dave", ""); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(3 * time.Second) // the Hub exits two seconds after reaching the limit
	waiting.Alive(t)
	if log := waiting.LogText(t); strings.Contains(log, "Aborting due to") {
		t.Errorf("Hub log has %q", "Aborting due to")
	}
	for _, r := range waiting.quota.requests(before) {
		if r.Waitlist == nil || !r.Waitlist.Join || r.Waitlist.AutoStart || r.UserOptions["gpuhub_waitlist"] != true {
			t.Errorf("admission %+v (waitlist %+v), want a join without autoStart", r, r.Waitlist)
		}
	}
	if n := waiting.quota.count() - before; n != 6 {
		t.Errorf("gpu-quota was asked %d times, want 6", n)
	}
	waiting.NoServerNoPod(t, "dave")
	t.Logf("jupyterhub %s (%s): 6 waitlist refusals in a row with consecutive_failure_limit 5, Hub serving", waiting.Proc.Version(), waiting.Name)
}

// TestWaitlistOfferedAfterHeld: gpu-profiles counts the MIG 1g.5gb slices free, but gpu-quota holds the free one
// for the people in line (reason waitlist) and tells erin to join from the form. Her form then offers the
// waitlist on that choice (selectable as before, not join-only), and joining from it gets her place.
func TestWaitlistOfferedAfterHeld(t *testing.T) {
	ctx := hubtest.CtxT(t, time.Minute)
	var mig string
	for _, p := range waiting.askProfiles(t, "erin", []string{}).Profiles {
		if p.Gpuhub != nil && p.Gpuhub.Available && strings.Contains(p.Gpuhub.Class, "1g.5gb") {
			mig = p.Slug
		}
	}
	if mig == "" {
		t.Fatal("gpu-profiles offers erin no available MIG 1g.5gb choice")
	}
	tok := waiting.UserToken(t, "erin")
	code, body, err := waiting.StartServer(ctx, tok, "erin", "", mig)
	if err != nil || !answered(code) {
		t.Fatalf("POST erin's %s server: %d %s %v", mig, code, body, err)
	}
	ev, all, err := waiting.FailedEvent(ctx, tok, "erin")
	if err != nil {
		t.Fatalf("%v (events %+v)", err, all)
	}
	if msg := strings.TrimPrefix(ev.Message, "Spawn failed: "); msg != heldMessage {
		t.Errorf("message %q, want gpu-quota's %q", msg, heldMessage)
	}
	if err := waiting.WaitStopped(ctx, "erin", ""); err != nil {
		t.Fatal(err)
	}
	b := waiting.Login(t, "erin")
	_, form := b.Get(t, "hub/spawn")
	c := controls(t, form)
	if !slices.Contains(c.Join, mig) || !slices.Contains(c.AutoStart, mig) || slices.Contains(c.JoinOnly, mig) {
		t.Errorf("erin's form after the refusal: waitlist controls %+v, want %s offered (not join-only)", c, mig)
	}
	before := waiting.quota.count()
	start := time.Now()
	code, page, location := b.Post(t, hubtest.SpawnAction(t, form), url.Values{"profile": {mig}, "gpuhub-waitlist": {mig}})
	if code != http.StatusFound {
		t.Fatalf("POST /hub/spawn = %d to %q:\n%s", code, location, page)
	}
	for !strings.Contains(html.UnescapeString(page), queuedMessage) {
		if time.Since(start) > seen {
			t.Fatalf("spawn-pending page (%d) without gpu-quota's place in line %s after asking:\n%s", code, seen, page)
		}
		time.Sleep(100 * time.Millisecond)
		code, page = b.Get(t, location)
	}
	if reqs := waiting.quota.requests(before); len(reqs) != 1 || reqs[0].Waitlist == nil || !reqs[0].Waitlist.Join {
		t.Errorf("admissions %+v, want one join", reqs)
	}
	waiting.NoServerNoPod(t, "erin")
}

// TestWaitlistNoTokenInLogs: the glue never writes gpu-quota's token either.
func TestWaitlistNoTokenInLogs(t *testing.T) {
	log := waiting.LogText(t)
	for name, tok := range map[string]string{"gpu-quota": waiting.quota.token, "gpu-profiles": waiting.profilesToken} {
		if strings.Contains(log, tok) {
			t.Errorf("hub %s's log contains %s's token", waiting.Name, name)
		}
	}
}
