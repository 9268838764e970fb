//go:build integration

package profiles_test

import (
	"context"
	"testing"

	"github.com/gpuhub/gpuhub/e2e/hubint/hubtest"
)

// ht is this Hub as the shared helpers (e2e/hubint/hubtest) see it.
func (h *hubUnderTest) ht() *hubtest.Hub {
	return &hubtest.Hub{Name: h.name, Proc: h.hub, Password: password, MetricsService: metricsService, TokenNote: "hubint/profiles"}
}

// The shared helpers under the names these tests use.
type (
	browser       = hubtest.Browser
	progressEvent = hubtest.ProgressEvent
)

var (
	spawnAction = hubtest.SpawnAction
	ctxT        = hubtest.CtxT
)

func (h *hubUnderTest) startServer(ctx context.Context, token, user, server, profile string) (int, []byte, error) {
	return h.ht().StartServer(ctx, token, user, server, profile)
}

func (h *hubUnderTest) waitStopped(ctx context.Context, user, server string) error {
	return h.ht().WaitStopped(ctx, user, server)
}

func (h *hubUnderTest) userToken(t *testing.T, user string) string {
	t.Helper()
	return h.ht().UserToken(t, user)
}

func (h *hubUnderTest) failedEvent(ctx context.Context, token, user string) (progressEvent, []progressEvent, error) {
	return h.ht().FailedEvent(ctx, token, user)
}

func (h *hubUnderTest) login(t *testing.T, user string) *browser {
	t.Helper()
	return h.ht().Login(t, user)
}

func (h *hubUnderTest) metric(t *testing.T, sample string) float64 {
	t.Helper()
	return h.ht().Metric(t, sample)
}

func (h *hubUnderTest) alive(t *testing.T) { t.Helper(); h.ht().Alive(t) }
