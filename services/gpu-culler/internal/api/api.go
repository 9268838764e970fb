// Package api is gpu-culler's HTTP API under the Hub service prefix (contract C3):
//
//	GET  api/v1/me            the user's last stop by the culler and pending notices (the panel; Hub token)
//	POST api/v1/snooze        snooze the stop announced on one of the user's servers (Hub token)
//	GET  api/v1/stops/{user}  a user's last stop (the Hub glue with gpu-culler's own token; the user; admins)
//	GET  api/v1/decisions     the culler's decisions (Hub admins and the reader services)
//
// Every answer is JSON; errors are {"status", "message"} with a message that says what to do next.
package api

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/gpuhub/gpuhub/services/gpu-culler/internal/notices"
	"github.com/gpuhub/gpuhub/services/gpu-culler/internal/stops"
	"github.com/gpuhub/gpuhub/services/internal/decision"
	"github.com/gpuhub/gpuhub/services/internal/notice"
)

// Stops is the last stop of each user (*stops.Store).
type Stops interface {
	Last(user string) (stops.Stop, bool)
}

// Snoozer snoozes an announced stop (*snooze.Snoozer); actor is who asked (the user or an admin).
type Snoozer interface {
	Snooze(ctx context.Context, actor, user, server string) (notice.Notice, error)
}

// Options configure the handler.
type Options struct {
	Prefix string
	// Auth is hubauth's Middleware: every endpoint but the Hub glue's stops takes a Hub token.
	Auth func(http.Handler) http.Handler
	// OwnToken is gpu-culler's own Hub API token, which the Hub glue sends to read stops; compared in constant
	// time. Empty: only Hub tokens are taken.
	OwnToken  string
	Decisions *decision.Log
	Stops     Stops
	Snoozer   Snoozer
	// Notices are the culler's notices on user's running servers (notices.FromPods over the user's pods).
	Notices func(user string) []notices.OnServer
	// ReaderServices are the Hub services that may read the decisions besides admins.
	ReaderServices []string
	Logger         *slog.Logger
}

// New returns the handler; it sees full paths, prefix included.
func New(o Options) http.Handler {
	return http.NotFoundHandler()
}
