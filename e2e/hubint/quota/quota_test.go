//go:build integration

package quota_test

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpuhub/gpuhub/e2e/hubint/hubtest"
)

// answered: a REST spawn the Hub did not wait for (slow_spawn_timeout 0). See TestRESTRefusalProgressStream.
func answered(code int) bool { return code == http.StatusAccepted || code == http.StatusCreated }

// seen is the promise of the issue: the refusal is in front of the user within 5 s of asking.
const seen = 5 * time.Second

// closedMessage is what the glue says when gpu-quota cannot answer and onUnavailable is closed.
const closedMessage = "The quota service cannot check your GPU quota right now, so GPU servers cannot start. " +
	"Try again in a few minutes, or pick a CPU-only profile."

// TestRESTRefusalProgressStream: with z2jh's slow_spawn_timeout 0 the Hub answers a REST spawn without waiting
// for it: 202, or 201 on JupyterHub 6.1 when the refusal was already in (its handler reads "pending" after a
// zero-second wait; a 201 does not mean the server runs). The refusal, in gpu-quota's words, is the failure event
// of the progress stream either way.
func TestRESTRefusalProgressStream(t *testing.T) {
	want := z2jh.askQuota(t, "bob", []string{"students"}, "h100")
	if want.Allow || want.Message == "" {
		t.Fatalf("gpu-quota admits bob's H100 (%+v); the test policy refuses whole GPUs", want)
	}
	tok := z2jh.UserToken(t, "bob")
	ctx := hubtest.CtxT(t, 30*time.Second)
	start := time.Now()
	code, body, err := z2jh.StartServer(ctx, tok, "bob", "", "h100")
	if err != nil {
		t.Fatal(err)
	}
	if !answered(code) {
		t.Fatalf("POST bob's server with slow_spawn_timeout 0: %d %s, want 202 (or 201)", code, body)
	}
	ev, all, err := z2jh.FailedEvent(ctx, tok, "bob")
	took := time.Since(start)
	if err != nil {
		t.Fatalf("%v (events %+v)", err, all)
	}
	if !ev.Failed || ev.Message != "Spawn failed: "+want.Message {
		t.Errorf("progress failure event = %+v\nwant message %q", ev, "Spawn failed: "+want.Message)
	}
	if took > seen {
		t.Errorf("refusal reached the progress stream after %s, want within %s", took, seen)
	}
	t.Logf("jupyterhub %s, REST spawn: %d, then in the progress stream after %s: %q", z2jh.Proc.Version(), code, took.Round(time.Millisecond), ev.Message)
	z2jh.NoServerNoPod(t, "bob")
}

// TestRESTRefusal403: with JupyterHub's default slow_spawn_timeout the refusal is the answer to the spawn
// request itself: 403 with gpu-quota's message (5.5 sends the HTTPError's text, 6.x jupyterhub_message; the
// glue makes them the same).
func TestRESTRefusal403(t *testing.T) {
	want := plain.askQuota(t, "bob", []string{"students"}, "h100")
	tok := plain.UserToken(t, "bob")
	start := time.Now()
	code, body, err := plain.StartServer(hubtest.CtxT(t, 30*time.Second), tok, "bob", "", "h100")
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Status  int    `json:"status"`
		Message string `json:"message"`
	}
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatalf("body %s: %v", body, err)
	}
	if code != http.StatusForbidden || got.Status != http.StatusForbidden || got.Message != want.Message {
		t.Errorf("POST bob's server = %d %s\nwant 403 with message %q", code, body, want.Message)
	}
	if took > seen {
		t.Errorf("403 after %s, want within %s", took, seen)
	}
	t.Logf("jupyterhub %s, REST spawn: %d after %s: %s", plain.Proc.Version(), code, took.Round(time.Millisecond), body)
	plain.NoServerNoPod(t, "bob")
}

// TestFormRefusal: the spawn form (POST /hub/spawn). With JupyterHub's defaults the form comes back at once with
// the message (403); with z2jh's slow_spawn_timeout 0 the browser is sent to the spawn-pending page, which shows
// the message as soon as the spawn has failed. Plain text either way, HTML-escaped by the Hub's template.
func TestFormRefusal(t *testing.T) {
	for _, h := range []*hubUnderTest{plain, z2jh} {
		t.Run(h.Name, func(t *testing.T) {
			want := h.askQuota(t, "carol", []string{"researchers"}, "h100")
			b := h.Login(t, "carol")
			_, form := b.Get(t, "hub/spawn")
			if !strings.Contains(form, `value="h100"`) {
				t.Fatalf("spawn form has no h100 profile:\n%s", form)
			}
			start := time.Now()
			code, page, location := b.Post(t, hubtest.SpawnAction(t, form), url.Values{"profile": {"h100"}})
			escaped := html.EscapeString(want.Message)
			switch h {
			case plain:
				if code != http.StatusForbidden || !strings.Contains(page, escaped) {
					t.Fatalf("POST /hub/spawn = %d, want 403 and the form with %q:\n%s", code, escaped, page)
				}
			case z2jh:
				if code != http.StatusFound || !strings.Contains(location, "spawn-pending/carol") {
					t.Fatalf("POST /hub/spawn = %d to %q, want 302 to spawn-pending", code, location)
				}
				for {
					code, page = b.Get(t, location)
					if strings.Contains(page, escaped) {
						break
					}
					if time.Since(start) > seen {
						t.Fatalf("spawn-pending page (%d) without the refusal %s after asking:\n%s", code, seen, page)
					}
					time.Sleep(100 * time.Millisecond)
				}
			}
			took := time.Since(start)
			if took > seen {
				t.Errorf("refusal on the page after %s, want within %s", took, seen)
			}
			t.Logf("jupyterhub %s (%s): the page shows the refusal %s after the form was sent (status %d)", h.Proc.Version(), h.Name, took.Round(time.Millisecond), code)
			h.NoServerNoPod(t, "carol")
		})
	}
}

// TestRefusalBurst is the trap of issue 10: JupyterHub 5.5 counts every failed spawn toward
// consecutive_failure_limit (5 here, as z2jh sets it) and exits when it is reached. Ten refusals in a row from
// one user and ten at once from ten users must leave the Hub serving; and the glue must not have eaten the Hub's
// count of real failures: two of those afterwards are logged as exactly "2 consecutive spawns failed".
func TestRefusalBurst(t *testing.T) {
	for _, h := range []*hubUnderTest{z2jh, plain} {
		t.Run(h.Name, func(t *testing.T) {
			ctx := hubtest.CtxT(t, 3*time.Minute)
			admin := h.Proc.AdminToken()
			refuse := func(user string) error {
				code, body, err := h.StartServer(ctx, admin, user, "", "h100")
				if err != nil {
					return err
				}
				if !answered(code) && code != http.StatusForbidden {
					return fmt.Errorf("POST %s's server: %d %s", user, code, body)
				}
				return h.WaitStopped(ctx, user, "")
			}
			for i := range 10 {
				if err := refuse("bob"); err != nil {
					t.Fatalf("refusal %d: %v", i+1, err)
				}
			}
			var wg sync.WaitGroup
			errs := make(chan error, 10)
			for i := range 10 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs <- refuse(fmt.Sprintf("user-%02d", i))
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Error(err)
				}
			}
			// The Hub exits two seconds after reaching the limit.
			time.Sleep(3 * time.Second)
			h.Alive(t)

			// Two real failures (a profile that does not exist: KubeSpawner raises, both Hub lines count it).
			for range 2 {
				if _, _, err := h.StartServer(ctx, admin, "bob", "", "no-such-profile"); err != nil {
					t.Fatalf("POST bob's server with an unknown profile: %v", err)
				}
				if err := h.WaitStopped(ctx, "bob", ""); err != nil {
					t.Fatal(err)
				}
			}
			if err := refuse("bob"); err != nil {
				t.Fatal(err)
			}
			time.Sleep(3 * time.Second)
			h.Alive(t)
			// 6.x logs the current count at every failed spawn, refusals too, without counting them.
			log := h.LogText(t)
			if !strings.Contains(log, "2 consecutive spawns failed") {
				t.Errorf("Hub log lacks %q: the refusals changed the Hub's count of real failures", "2 consecutive spawns failed")
			}
			for _, bad := range []string{"3 consecutive spawns failed", "Aborting due to"} {
				if strings.Contains(log, bad) {
					t.Errorf("Hub log has %q", bad)
				}
			}
			t.Logf("jupyterhub %s (%s): 21 refusals and 2 real failures with consecutive_failure_limit 5, Hub serving", h.Proc.Version(), h.Name)
		})
	}
}

// TestAdmitted: a GPU request the policy allows goes through, and the pod carries the decision's id.
func TestAdmitted(t *testing.T) {
	ctx := hubtest.CtxT(t, time.Minute)
	code, body, err := z2jh.StartServer(ctx, z2jh.Proc.AdminToken(), "alice", "", "t4-shared")
	if err != nil || code != http.StatusAccepted {
		t.Fatalf("POST alice's t4-shared server: %d %s %v", code, body, err)
	}
	defer z2jh.StopAndClean(t, "alice")
	pod := z2jh.WaitPod(t, "alice")
	if pod.Annotations["gpuhub.io/quota-decision"] == "" {
		t.Errorf("admitted pod %s has no gpuhub.io/quota-decision annotation: %v", pod.Name, pod.Annotations)
	}
}

// TestUnavailable: gpu-quota hung (no answer within the glue's 2 s) or down. closed refuses GPU servers with the
// "cannot check" message, open admits them; both are counted in the Hub's /metrics. CPU-only servers never ask.
func TestUnavailable(t *testing.T) {
	t.Run("closed, gpu-quota hung", func(t *testing.T) {
		pid := z2jh.quota.Proc.Pid()
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = syscall.Kill(pid, syscall.SIGCONT) }()
		z2jh.refusedUnavailable(t, "dave")
	})
	t.Run("closed, gpu-quota down", func(t *testing.T) {
		z2jh.stopQuota(t)
		z2jh.refusedUnavailable(t, "dave")

		// A CPU-only server does not depend on gpu-quota.
		ctx := hubtest.CtxT(t, time.Minute)
		code, body, err := z2jh.StartServer(ctx, z2jh.Proc.AdminToken(), "erin", "", "cpu")
		if err != nil || code != http.StatusAccepted {
			t.Fatalf("POST erin's cpu server: %d %s %v", code, body, err)
		}
		defer z2jh.StopAndClean(t, "erin")
		z2jh.WaitPod(t, "erin")
	})
	t.Run("open, gpu-quota down", func(t *testing.T) {
		plain.stopQuota(t)
		sample := `gpuhub_quota_glue_unavailable_total{mode="open"}`
		before := plain.Metric(t, sample)
		// JupyterHub's default slow_spawn_timeout holds the answer for 10 s while the admitted pod waits for a
		// kubelet that does not exist here; the spawn goes on without the client.
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		_, _, _ = plain.StartServer(ctx, plain.Proc.AdminToken(), "dave", "", "h100")
		cancel()
		defer plain.StopAndClean(t, "dave")
		plain.WaitPod(t, "dave")
		if got := plain.Metric(t, sample); got != before+1 {
			t.Errorf("%s = %v, want %v", sample, got, before+1)
		}
		if !strings.Contains(plain.LogText(t), "admitting dave's GPU server '' unchecked (onUnavailable open)") {
			t.Error("Hub log does not say that dave's server was admitted unchecked")
		}
	})
}

// TestNoTokenInLogs: the glue never writes the token it sends.
func TestNoTokenInLogs(t *testing.T) {
	for _, h := range []*hubUnderTest{z2jh, plain} {
		if strings.Contains(h.LogText(t), h.quotaToken) {
			t.Errorf("hub %s's log contains gpu-quota's token", h.Name)
		}
	}
}

// TestGlueUnit runs the glue's Python unit tests (glue_test.py) with the Hub's own Python: the pod's GPU request
// as the scheduler sums it, where the URL and token come from, and a Hub without gpu-quota.
func TestGlueUnit(t *testing.T) {
	hubtest.GlueUnit(t, chartDir)
}

// refusedUnavailable spawns a T4 share (which the policy admits) for user while gpu-quota cannot answer: refused
// with the closed message within seen, counted.
func (h *hubUnderTest) refusedUnavailable(t *testing.T, user string) {
	t.Helper()
	sample := `gpuhub_quota_glue_unavailable_total{mode="closed"}`
	before := h.Metric(t, sample)
	tok := h.UserToken(t, user)
	ctx := hubtest.CtxT(t, 30*time.Second)
	start := time.Now()
	code, body, err := h.StartServer(ctx, tok, user, "", "t4-shared")
	if err != nil || !answered(code) {
		t.Fatalf("POST %s's server: %d %s %v", user, code, body, err)
	}
	ev, all, err := h.FailedEvent(ctx, tok, user)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("%v (events %+v)", err, all)
	}
	if ev.Message != "Spawn failed: "+closedMessage {
		t.Errorf("failure event %q, want %q", ev.Message, "Spawn failed: "+closedMessage)
	}
	if took > seen {
		t.Errorf("refused after %s, want within %s", took, seen)
	}
	if got := h.Metric(t, sample); got != before+1 {
		t.Errorf("%s = %v, want %v", sample, got, before+1)
	}
	h.NoServerNoPod(t, user)
	t.Logf("refused after %s: %q", took.Round(time.Millisecond), ev.Message)
}

// stopQuota stops the Hub's gpu-quota for the test and starts it again after.
func (h *hubUnderTest) stopQuota(t *testing.T) {
	t.Helper()
	h.quota.Stop()
	t.Cleanup(func() {
		if err := h.quota.Start(context.Background(), true); err != nil {
			t.Errorf("restart gpu-quota of %s: %v", h.Name, err)
		}
	})
}
