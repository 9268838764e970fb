//go:build integration

package profiles_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuhub/gpuhub/e2e/hubint/hubtest"
)

// seen is the promise of the issue: a refusal is in front of the user within 5 s of asking.
const seen = 5 * time.Second

// answered: a REST spawn the Hub did not wait for (slow_spawn_timeout 0): 202, or 201 on JupyterHub 6.1 when
// the refusal was already in.
func answered(code int) bool { return code == http.StatusAccepted || code == http.StatusCreated }

// staticSlugs is the admin's static list (e2e/hub/values.yaml plus staticExtra): the fallback form.
var staticSlugs = []string{"cpu", "h100", "h100-x2", "a100-3g", "a100-1g", "t4-shared", "static-notes"}

// TestFormShowsLiveProfiles: bob's form lists gpu-profiles' answer for bob in its order, each choice with the
// free count gpu-profiles computed, and those counts are what the cluster holds: both H100s are in use, so
// the H100 choice is disabled with its reason; the MIG slices are free.
func TestFormShowsLiveProfiles(t *testing.T) {
	for _, h := range []*hubUnderTest{z2jh, plain} {
		t.Run(h.Name, func(t *testing.T) {
			want := h.askProfiles(t, "bob", []string{"students"})
			b := h.Login(t, "bob")
			code, page := b.Get(t, "hub/spawn")
			if code != http.StatusOK {
				t.Fatalf("GET /hub/spawn: %d\n%s", code, page)
			}
			got := parseForm(t, page)
			if note := formNote(page); note != "" && want.Note == "" {
				t.Errorf("live form shows a note %q", note)
			}
			var gotSlugs, wantSlugs []string
			for _, c := range got {
				gotSlugs = append(gotSlugs, c.Slug)
			}
			for _, p := range want.Profiles {
				wantSlugs = append(wantSlugs, p.Slug)
			}
			if !slices.Equal(gotSlugs, wantSlugs) {
				t.Fatalf("form choices %v, want gpu-profiles' %v", gotSlugs, wantSlugs)
			}
			sawH100 := false
			for i, p := range want.Profiles {
				c := got[i]
				if c.Name != p.DisplayName {
					t.Errorf("%s: label %q, want %q", p.Slug, c.Name, p.DisplayName)
				}
				if p.Gpuhub == nil {
					continue
				}
				g := p.Gpuhub
				if c.Disabled != !g.Available {
					t.Errorf("%s: disabled=%v, gpu-profiles says available=%v", p.Slug, c.Disabled, g.Available)
				}
				if !g.Available && c.Reason != g.ReasonText {
					t.Errorf("%s: reason %q, want %q", p.Slug, c.Reason, g.ReasonText)
				}
				if g.Kind == "cpu" {
					continue
				}
				if c.Free != g.Free || c.Total != g.Total {
					t.Errorf("%s: form says %d free of %d, gpu-profiles %d of %d", p.Slug, c.Free, c.Total, g.Free, g.Total)
				}
				if g.Count != 1 {
					continue
				}
				free, total := clusterFree(t, p)
				if c.Free != free || c.Total != total {
					t.Errorf("%s: form says %d free of %d, the cluster holds %d free of %d", p.Slug, c.Free, c.Total, free, total)
				}
				if strings.Contains(g.Class, "H100") {
					sawH100 = true
					if !c.Disabled || c.Free != 0 {
						t.Errorf("%s: carol holds both H100s, but the form shows it enabled with %d free", p.Slug, c.Free)
					}
				}
			}
			checkEscaped(t, page)
			if !sawH100 {
				t.Errorf("no single-H100 choice on the form: %v", gotSlugs)
			}
			t.Logf("jupyterhub %s (%s): %d choices, %s", h.Proc.Version(), h.Name, len(got), summary(got))
		})
	}
}

// TestFormCached: a second render within the glue's cache time does not ask gpu-profiles again; both are counted.
// A named server's form is asked for on its own (gpu-profiles computes it for that server), then cached too.
func TestFormCached(t *testing.T) {
	live, cached := `gpuhub_profiles_glue_requests_total{result="live"}`, `gpuhub_profiles_glue_requests_total{result="cached"}`
	beforeLive, beforeCached := z2jh.Metric(t, live), z2jh.Metric(t, cached)
	b := z2jh.Login(t, "alice")
	for _, path := range []string{"hub/spawn", "hub/spawn", "hub/spawn/alice/second", "hub/spawn/alice/second"} {
		if code, page := b.Get(t, path); code != http.StatusOK || len(parseForm(t, page)) == 0 {
			t.Fatalf("GET /%s: %d", path, code)
		}
	}
	if got := z2jh.Metric(t, live); got != beforeLive+2 {
		t.Errorf("%s = %v, want %v (one per server)", live, got, beforeLive+2)
	}
	if got := z2jh.Metric(t, cached); got != beforeCached+2 {
		t.Errorf("%s = %v, want %v", cached, got, beforeCached+2)
	}
}

// TestFallback: gpu-profiles down (connection refused) or hung (no answer within the glue's 1 s): the form still
// renders, from the admin's static list, with the note; the static list's HTML is shown as text.
func TestFallback(t *testing.T) {
	sample := `gpuhub_profiles_glue_requests_total{result="fallback"}`
	check := func(t *testing.T, h *hubUnderTest, user string) {
		t.Helper()
		before := h.Metric(t, sample)
		b := h.Login(t, user)
		start := time.Now()
		code, page := b.Get(t, "hub/spawn")
		took := time.Since(start)
		if code != http.StatusOK {
			t.Fatalf("GET /hub/spawn with gpu-profiles unavailable: %d\n%s", code, page)
		}
		if took > 3*time.Second {
			t.Errorf("form took %s with gpu-profiles unavailable, want under 3 s (the glue waits 1 s)", took)
		}
		if formNote(page) == "" {
			t.Errorf("fallback form has no note:\n%s", page)
		}
		got := parseForm(t, page)
		var slugs []string
		for _, c := range got {
			slugs = append(slugs, c.Slug)
			if c.Disabled {
				t.Errorf("fallback choice %s is disabled", c.Slug)
			}
		}
		if !slices.Equal(slugs, staticSlugs) {
			t.Errorf("fallback choices %v, want the static list %v", slugs, staticSlugs)
		}
		checkEscaped(t, page)
		if got := h.Metric(t, sample); got != before+1 {
			t.Errorf("%s = %v, want %v", sample, got, before+1)
		}
		t.Logf("jupyterhub %s (%s): fallback form in %s with note %q", h.Proc.Version(), h.Name, took.Round(time.Millisecond), formNote(page))
	}
	t.Run("down", func(t *testing.T) {
		plain.stopProfiles(t)
		check(t, plain, "dave")
	})
	t.Run("hung", func(t *testing.T) {
		pid := z2jh.profiles.Proc.Pid()
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = syscall.Kill(pid, syscall.SIGCONT) }()
		check(t, z2jh, "dave")
	})
}

// checkEscaped: the <script> descriptions and HTML names (gpu-profiles' overrides, the static list) are text
// on the page.
func checkEscaped(t *testing.T, page string) {
	t.Helper()
	if strings.Contains(page, `<script>document.title`) || strings.Contains(page, "<i>") {
		t.Errorf("the form carries a profile's HTML unescaped")
	}
	if !strings.Contains(page, html.EscapeString(scriptDescription)) {
		t.Errorf("the form lacks the escaped description %q", html.EscapeString(scriptDescription))
	}
}

// TestForcedSubmitRefused: bob forces the disabled H100 choice through the form (as a stale page or a
// hand-made POST would). Refused within 5 s with a message naming what is free (the MIG slices); no pod.
// With JupyterHub's defaults the form comes back with the message; with z2jh's slow_spawn_timeout 0 the
// spawn-pending page shows it.
func TestForcedSubmitRefused(t *testing.T) {
	for _, h := range []*hubUnderTest{plain, z2jh} {
		t.Run(h.Name, func(t *testing.T) {
			h100 := h.h100Slug(t, "bob", []string{"students"})
			b := h.Login(t, "bob")
			_, form := b.Get(t, "hub/spawn")
			start := time.Now()
			code, page, location := b.Post(t, hubtest.SpawnAction(t, form), url.Values{"profile": {h100}})
			switch h {
			case plain:
				if code != http.StatusForbidden {
					t.Fatalf("POST /hub/spawn = %d, want 403 and the form with the refusal:\n%s", code, page)
				}
			case z2jh:
				if code != http.StatusFound || !strings.Contains(location, "spawn-pending/bob") {
					t.Fatalf("POST /hub/spawn = %d to %q, want 302 to spawn-pending", code, location)
				}
				for !strings.Contains(page, "1g.5gb") {
					if time.Since(start) > seen {
						t.Fatalf("spawn-pending page (%d) without the refusal %s after asking:\n%s", code, seen, page)
					}
					time.Sleep(100 * time.Millisecond)
					code, page = b.Get(t, location)
				}
			}
			took := time.Since(start)
			msg := errorMessage(page)
			checkRefusal(t, msg)
			if took > seen {
				t.Errorf("refusal on the page after %s, want within %s", took, seen)
			}
			t.Logf("jupyterhub %s (%s): refused %s after the form was sent: %q", h.Proc.Version(), h.Name, took.Round(time.Millisecond), msg)
			h.NoServerNoPod(t, "bob")
		})
	}
}

// TestAPISpawnRefused: a REST spawn naming the exhausted choice. JupyterHub's defaults: 403 with the message.
// z2jh's: 202 (or 201), the message in the progress stream. Within 5 s either way, no pod.
func TestAPISpawnRefused(t *testing.T) {
	for _, h := range []*hubUnderTest{plain, z2jh} {
		t.Run(h.Name, func(t *testing.T) {
			h100 := h.h100Slug(t, "carol", []string{"researchers"})
			tok := h.UserToken(t, "carol")
			ctx := hubtest.CtxT(t, 30*time.Second)
			start := time.Now()
			code, body, err := h.StartServer(ctx, tok, "carol", "", h100)
			if err != nil {
				t.Fatal(err)
			}
			var msg string
			switch h {
			case plain:
				var got struct {
					Status  int    `json:"status"`
					Message string `json:"message"`
				}
				if err := json.Unmarshal(body, &got); err != nil || code != http.StatusForbidden {
					t.Fatalf("POST carol's server = %d %s, want 403", code, body)
				}
				msg = got.Message
			case z2jh:
				if !answered(code) {
					t.Fatalf("POST carol's server with slow_spawn_timeout 0: %d %s, want 202 (or 201)", code, body)
				}
				ev, all, err := h.FailedEvent(ctx, tok, "carol")
				if err != nil {
					t.Fatalf("%v (events %+v)", err, all)
				}
				var ok bool
				if msg, ok = strings.CutPrefix(ev.Message, "Spawn failed: "); !ok || !ev.Failed {
					t.Fatalf("progress failure event %+v", ev)
				}
			}
			took := time.Since(start)
			checkRefusal(t, msg)
			if took > seen {
				t.Errorf("refused after %s, want within %s", took, seen)
			}
			t.Logf("jupyterhub %s (%s): REST spawn %d, refused after %s: %q", h.Proc.Version(), h.Name, code, took.Round(time.Millisecond), msg)
			h.NoServerNoPod(t, "carol")
		})
	}
}

// checkRefusal: the refusal says the H100 is not available and names what is free instead.
func checkRefusal(t *testing.T, msg string) {
	t.Helper()
	if !strings.Contains(msg, "H100") || !strings.Contains(msg, "1g.5gb") || !strings.Contains(strings.ToLower(msg), "free") {
		t.Errorf("refusal %q does not name the H100 and what is free (the A100 MIG 1g.5gb slices)", msg)
	}
}

// TestRefusalsKeepHubRunning is the trap of JupyterHub 5.5: it counts every failed spawn toward
// consecutive_failure_limit (5 here, as z2jh sets it) and exits when it is reached. Six refusals in a row
// must leave the Hub serving.
func TestRefusalsKeepHubRunning(t *testing.T) {
	for _, h := range []*hubUnderTest{z2jh, plain} {
		t.Run(h.Name, func(t *testing.T) {
			ctx := hubtest.CtxT(t, 2*time.Minute)
			h100 := h.h100Slug(t, "bob", []string{"students"})
			for i := range 6 {
				code, body, err := h.StartServer(ctx, h.Proc.AdminToken(), "bob", "", h100)
				if err != nil {
					t.Fatal(err)
				}
				if !answered(code) && code != http.StatusForbidden {
					t.Fatalf("refusal %d: POST bob's server: %d %s", i+1, code, body)
				}
				if err := h.WaitStopped(ctx, "bob", ""); err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(3 * time.Second) // the Hub exits two seconds after reaching the limit
			h.Alive(t)
			if log := h.LogText(t); strings.Contains(log, "Aborting due to") {
				t.Errorf("Hub log has %q", "Aborting due to")
			}
			t.Logf("jupyterhub %s (%s): 6 refusals in a row with consecutive_failure_limit 5, Hub serving", h.Proc.Version(), h.Name)
		})
	}
}

// TestUnknownChoiceRefused: REST spawns naming a choice nobody offers (a hand-made request, a stale script).
// KubeSpawner alone raises "No such profile", which both Hub lines count toward consecutive_failure_limit: five
// would stop the Hub. The glue refuses them instead, telling the user to reload the form; six in a row leave the
// Hub serving.
func TestUnknownChoiceRefused(t *testing.T) {
	const want = "The choice 'no-such-profile' is not offered to you. Reload the spawn page and pick again."
	for _, h := range []*hubUnderTest{plain, z2jh} {
		t.Run(h.Name, func(t *testing.T) {
			ctx := hubtest.CtxT(t, 2*time.Minute)
			tok := h.UserToken(t, "dave")
			for i := range 6 {
				code, body, err := h.StartServer(ctx, tok, "dave", "", "no-such-profile")
				if err != nil {
					t.Fatal(err)
				}
				var msg string
				switch h {
				case plain:
					var got struct {
						Message string `json:"message"`
					}
					if err := json.Unmarshal(body, &got); err != nil || code != http.StatusForbidden {
						t.Fatalf("spawn %d: POST dave's server = %d %s, want 403", i+1, code, body)
					}
					msg = got.Message
				case z2jh:
					if !answered(code) {
						t.Fatalf("spawn %d: POST dave's server with slow_spawn_timeout 0: %d %s, want 202 (or 201)", i+1, code, body)
					}
					ev, all, err := h.FailedEvent(ctx, tok, "dave")
					if err != nil {
						t.Fatalf("%v (events %+v)", err, all)
					}
					msg = strings.TrimPrefix(ev.Message, "Spawn failed: ")
				}
				if msg != want {
					t.Errorf("spawn %d: message %q, want %q", i+1, msg, want)
				}
				if err := h.WaitStopped(ctx, "dave", ""); err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(3 * time.Second) // the Hub exits two seconds after reaching the limit
			h.Alive(t)
			log := h.LogText(t)
			for _, bad := range []string{"Aborting due to", "No such profile"} {
				if strings.Contains(log, bad) {
					t.Errorf("Hub log has %q", bad)
				}
			}
			h.NoServerNoPod(t, "dave")
			t.Logf("jupyterhub %s (%s): 6 unknown choices refused in a row with consecutive_failure_limit 5, Hub serving", h.Proc.Version(), h.Name)
		})
	}
}

// TestStaticChoiceAtStart: a choice from the static list (the fallback form) still resolves when gpu-profiles
// answers at start: the T4 share starts (its pod carries the static profile's label), and the H100 of the
// static list is judged by the live H100 choice: refused, naming what is free.
func TestStaticChoiceAtStart(t *testing.T) {
	ctx := hubtest.CtxT(t, time.Minute)
	code, body, err := z2jh.StartServer(ctx, z2jh.Proc.AdminToken(), "erin", "", "t4-shared")
	if err != nil || !answered(code) {
		t.Fatalf("POST erin's t4-shared server: %d %s %v", code, body, err)
	}
	pod := z2jh.WaitPod(t, "erin")
	z2jh.StopAndClean(t, "erin")
	if pod.Labels["gpuhub.io/profile"] != "t4-shared" {
		t.Errorf("erin's pod labels %v, want gpuhub.io/profile=t4-shared", pod.Labels)
	}

	code, body, err = plain.StartServer(ctx, plain.Proc.AdminToken(), "frank", "", "h100")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Message string `json:"message"`
	}
	if code != http.StatusForbidden {
		t.Fatalf("POST frank's static h100 server = %d %s, want 403", code, body)
	}
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatalf("frank's refusal %s: %v", body, err)
	}
	checkRefusal(t, got.Message)
	plain.NoServerNoPod(t, "frank")
}

// TestNoTokenInLogs: the glue never writes the token it sends.
func TestNoTokenInLogs(t *testing.T) {
	for _, h := range []*hubUnderTest{z2jh, plain} {
		if strings.Contains(h.LogText(t), h.profilesToken) {
			t.Errorf("hub %s's log contains gpu-profiles' token", h.Name)
		}
	}
}

// TestGlueUnit runs the profile part's Python unit tests (glue_test.py) with the Hub's own Python: the
// callable's cache and fallback, the start-time list, the refusal and the template's markup.
func TestGlueUnit(t *testing.T) {
	hubtest.GlueUnit(t, chartDir)
}

// --- gpu-profiles' answer (C1) ---

type profilesAnswer struct {
	Profiles []profile `json:"profiles"`
	Note     string    `json:"note"`
}

type profile struct {
	Slug        string `json:"slug"`
	DisplayName string `json:"display_name"`
	Description string `json:"description"`
	Default     bool   `json:"default"`
	Override    struct {
		NodeSelector map[string]string `json:"node_selector"`
		Limits       map[string]string `json:"extra_resource_limits"`
	} `json:"kubespawner_override"`
	Gpuhub *struct {
		Kind       string `json:"kind"`
		Class      string `json:"class"`
		Count      int64  `json:"count"`
		Free       int64  `json:"free"`
		Total      int64  `json:"total"`
		Available  bool   `json:"available"`
		Reason     string `json:"reason"`
		ReasonText string `json:"reasonText"`
	} `json:"gpuhub"`
}

// askProfiles asks gpu-profiles directly what the glue asks it for user: what the form must show.
func (h *hubUnderTest) askProfiles(t *testing.T, user string, groups []string) profilesAnswer {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"user": user, "groups": groups, "server": ""})
	req, err := http.NewRequestWithContext(hubtest.CtxT(t, 10*time.Second), http.MethodPost, h.profilesURL+"api/v1/profiles", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "token "+h.profilesToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("gpu-profiles: %s %s", resp.Status, b)
	}
	var a profilesAnswer
	if err := json.Unmarshal(b, &a); err != nil {
		t.Fatalf("gpu-profiles answer %s: %v", b, err)
	}
	return a
}

// h100Slug is the single-H100 choice gpu-profiles offers user (shown disabled: carol's pods hold both).
func (h *hubUnderTest) h100Slug(t *testing.T, user string, groups []string) string {
	t.Helper()
	for _, p := range h.askProfiles(t, user, groups).Profiles {
		if p.Gpuhub != nil && p.Gpuhub.Kind == "gpu" && p.Gpuhub.Count == 1 && strings.Contains(p.Gpuhub.Class, "H100") {
			if p.Gpuhub.Available {
				t.Fatalf("gpu-profiles offers %s as available, but both H100s are held", p.Slug)
			}
			return p.Slug
		}
	}
	t.Fatalf("gpu-profiles offers %s no single-H100 choice", user)
	return ""
}

// clusterFree counts what the cluster holds of p's GPU resource on the nodes p selects: allocatable on Ready,
// schedulable nodes, minus what pods bound there (and not finished) ask for.
func clusterFree(t *testing.T, p profile) (free, total int64) {
	t.Helper()
	var res string
	for name := range p.Override.Limits {
		if strings.HasPrefix(name, "nvidia.com/") {
			res = name
		}
	}
	if res == "" {
		t.Fatalf("%s asks for no GPU resource: %v", p.Slug, p.Override.Limits)
	}
	ctx := hubtest.CtxT(t, 10*time.Second)
	nodes, err := admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	selected := map[string]bool{}
	for _, n := range nodes.Items {
		match := !n.Spec.Unschedulable
		for k, v := range p.Override.NodeSelector {
			match = match && n.Labels[k] == v
		}
		if !match {
			continue
		}
		q := n.Status.Allocatable[corev1.ResourceName(res)]
		total += q.Value()
		selected[n.Name] = true
	}
	pods, err := admin.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	used := int64(0)
	for _, pod := range pods.Items {
		if !selected[pod.Spec.NodeName] || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		for _, c := range pod.Spec.Containers {
			q := c.Resources.Limits[corev1.ResourceName(res)]
			used += q.Value()
		}
	}
	return total - used, total
}

// --- the form ---

type choice struct {
	ID, Slug, Name, Description, Reason string
	Disabled                            bool
	Free, Total                         int64
}

var (
	radioRe = regexp.MustCompile(`<input type="radio" name="profile" id="(gpuhub-profile-\d+)" value="([^"]*)"([^>]*)>`)
	noteRe  = regexp.MustCompile(`id="gpuhub-note">([^<]*)</div>`)
	errorRe = regexp.MustCompile(`(?s)class="spawn-error-msg[^"]*">(.*?)</p>`)
	// failedRe: the spawn-pending page of a failed spawn shows the message in a paragraph of its own.
	failedRe = regexp.MustCompile(`(?s)<p>\s*([^<]*1g\.5gb[^<]*?)\s*</p>`)
)

// parseForm reads the glue's form (its markup is the glue's own template) and checks what makes it usable
// without a mouse and with a screen reader: every radio has its label, a disabled one says why, linked by
// aria-describedby.
func parseForm(t *testing.T, page string) []choice {
	t.Helper()
	if !strings.Contains(page, "<fieldset>") || !strings.Contains(page, "<legend>") {
		t.Errorf("form has no fieldset with a legend")
	}
	var out []choice
	for _, m := range radioRe.FindAllStringSubmatch(page, -1) {
		c := choice{ID: m[1], Slug: html.UnescapeString(m[2])}
		attrs := m[3]
		c.Disabled = strings.Contains(attrs, " disabled")
		label := regexp.MustCompile(`(?s)<label for="` + c.ID + `">([^<]*)(?:\s*<span class="gpuhub-free">(\d+) free(?: of (\d+))?</span>)?`).FindStringSubmatch(page)
		if label == nil {
			t.Errorf("radio %s (%s) has no label", c.ID, c.Slug)
			continue
		}
		c.Name = html.UnescapeString(strings.TrimSpace(label[1]))
		c.Free, _ = strconv.ParseInt(label[2], 10, 64)
		c.Total, _ = strconv.ParseInt(label[3], 10, 64)
		if d := regexp.MustCompile(`id="` + c.ID + `-desc">([^<]*)</p>`).FindStringSubmatch(page); d != nil {
			c.Description = html.UnescapeString(d[1])
		}
		if !strings.Contains(attrs, `aria-describedby="`+c.ID+`-desc`) {
			t.Errorf("radio %s (%s) is not described by its description", c.ID, c.Slug)
		}
		if c.Disabled {
			r := regexp.MustCompile(`id="` + c.ID + `-reason">([^<]*)</p>`).FindStringSubmatch(page)
			if r == nil || !strings.Contains(attrs, `aria-disabled="true"`) || !strings.Contains(attrs, c.ID+"-reason") {
				t.Errorf("disabled radio %s (%s) lacks aria-disabled or a reason linked by aria-describedby: %s", c.ID, c.Slug, attrs)
			} else {
				c.Reason = html.UnescapeString(r[1])
			}
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		t.Fatalf("no choices on the form:\n%s", page)
	}
	return out
}

func formNote(page string) string {
	if m := noteRe.FindStringSubmatch(page); m != nil {
		return html.UnescapeString(m[1])
	}
	return ""
}

// errorMessage is the refusal on the re-rendered form or on the spawn-pending page (HTML-escaped there).
func errorMessage(page string) string {
	if m := errorRe.FindStringSubmatch(page); m != nil {
		return strings.TrimPrefix(html.UnescapeString(strings.TrimSpace(m[1])), "Error: ")
	}
	if m := failedRe.FindStringSubmatch(page); m != nil {
		return html.UnescapeString(m[1])
	}
	return page
}

func summary(cs []choice) string {
	var parts []string
	for _, c := range cs {
		s := fmt.Sprintf("%s %d/%d", c.Slug, c.Free, c.Total)
		if c.Disabled {
			s += " (disabled: " + c.Reason + ")"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}

// --- servers and pods ---

// stopProfiles stops the Hub's gpu-profiles for the test and starts it again after.
func (h *hubUnderTest) stopProfiles(t *testing.T) {
	t.Helper()
	h.profiles.Stop()
	t.Cleanup(func() {
		if err := h.profiles.Start(context.Background(), true); err != nil {
			t.Errorf("restart gpu-profiles of %s: %v", h.Name, err)
		}
	})
}
