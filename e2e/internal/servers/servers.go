// Package servers starts and stops single-user servers through the Hub's REST API and waits for the outcome,
// for the end-to-end tests (e2e/e2etest, e2e/quotae2e, e2e/profilese2e, e2e/cullere2e).
package servers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpuhub/gpuhub/hubapi"
)

// StartReady starts user's server (profile in user_options) and waits up to within until it is ready. It fails
// at once when the spawn ends without a server (a refusal, a failure).
func StartReady(ctx context.Context, c *hubapi.Client, user, server, profile string, within time.Duration) error {
	if _, err := c.StartServer(ctx, user, server, map[string]any{"profile": profile}); err != nil {
		return fmt.Errorf("start %s/%s (%s): %w", user, server, profile, err)
	}
	return wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, within, true, func(ctx context.Context) (bool, error) {
		u, err := c.GetUser(ctx, user)
		if err != nil {
			return false, nil
		}
		s, ok := u.Servers[server]
		if ok && s.Ready {
			return true, nil
		}
		if !ok || s.Pending == "" {
			return false, fmt.Errorf("%s/%s is neither ready nor starting: the spawn failed", user, server)
		}
		return false, nil
	})
}

// Stop stops user's server (removing a named one) and waits up to a minute until the Hub no longer runs it. A server that does
// not exist, or cannot be stopped because it is not running, is not an error.
func Stop(ctx context.Context, c *hubapi.Client, user, server string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	// A start still pending is first given a while to end: JupyterHub 5.5 answers a stop that interrupts
	// KubeSpawner while it creates the pod with a 500, which z2jh's slow_spawn_timeout 0 makes likely (its REST
	// start returns at once). A start that stays pending longer (a pod nothing can place) is interrupted; a 500
	// while it is still pending is tried again.
	_ = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		u, err := c.GetUser(ctx, user)
		if err != nil {
			return false, nil
		}
		s, ok := u.Servers[server]
		return !ok || s.Pending != "spawn", nil
	})
	for {
		// The Hub refuses to remove the default server (400): only a named one is removed.
		_, err := c.StopServer(ctx, user, server, server != "")
		var apiErr *hubapi.APIError
		switch {
		case err == nil || hubapi.IsNotFound(err):
		case errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusBadRequest:
		case errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusInternalServerError && ctx.Err() == nil:
			time.Sleep(time.Second)
			continue
		default:
			return fmt.Errorf("stop %s/%s: %w", user, server, err)
		}
		break
	}
	_ = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		u, err := c.GetUser(ctx, user)
		if err != nil {
			return false, nil
		}
		s, ok := u.Servers[server]
		return !ok || (s.Pending == "" && !s.Ready), nil
	})
	return nil
}

// LogTail is the last n lines of a stack component's log (<stack dir>/logs/<component>.log).
func LogTail(stackDir, component string, n int) string {
	b, err := os.ReadFile(filepath.Join(stackDir, "logs", component+".log"))
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Hub is a suite's Hub for the helpers that fail the test: its admin client and its log, shown when a server
// does not become ready.
type Hub struct {
	Admin   *hubapi.Client
	LogTail func(n int) string
}

// StartReady is StartReady within 3 minutes; the test stops there when the server is not ready.
func (h Hub) StartReady(ctx context.Context, t testing.TB, user, server, profile string) {
	t.Helper()
	if err := StartReady(ctx, h.Admin, user, server, profile, 3*time.Minute); err != nil {
		t.Fatalf("server %s/%s (%s) not ready: %v\nhub log:\n%s", user, server, profile, err, h.LogTail(40))
	}
}

// Stop is Stop; the test fails (and goes on) when the server could not be stopped.
func (h Hub) Stop(t testing.TB, user, server string) {
	t.Helper()
	if err := Stop(context.Background(), h.Admin, user, server); err != nil {
		t.Error(err)
	}
}

// User is the Hub's model of user; the test stops there when it cannot be read.
func (h Hub) User(ctx context.Context, t testing.TB, user string) *hubapi.User {
	t.Helper()
	u, err := h.Admin.GetUser(ctx, user)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
