package bench

import (
	"crypto/subtle"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gpuhub/gpuhub/services/internal/server"
)

// UsagePath is where the usage API serves every running GPU server's telemetry (contract C1).
const UsagePath = "/services/gpu-usage/api/v1/servers"

// Usage stands in for the usage API's servers endpoint: fresh telemetry of every server of the fleet at each
// request, for the one token that may read it (the culler's). It is the load side of the benchmark.
type Usage struct {
	Servers []Server
	Token   string
	Now     func() time.Time
	// Requests counts the answered requests.
	Requests atomic.Int64
}

func (u *Usage) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet || r.URL.Path != UsagePath {
		server.WriteError(w, http.StatusNotFound, "not found: the benchmark's usage API serves GET %s only", UsagePath)
		return
	}
	auth := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(auth, "token ")
	if !ok {
		tok, _ = strings.CutPrefix(auth, "Bearer ")
	}
	if subtle.ConstantTimeCompare([]byte(tok), []byte(u.Token)) != 1 {
		server.WriteError(w, http.StatusForbidden, "only the culler's Hub token may read all servers")
		return
	}
	seq := int(u.Requests.Add(1))
	now := time.Now
	if u.Now != nil {
		now = u.Now
	}
	server.WriteJSON(w, http.StatusOK, Page(u.Servers, now(), seq))
}

// Stub answers every request with 200: it is every fake server's URL, so the Hub's check that a started server
// answers passes without a process per server.
func Stub() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("B3 benchmark: no single-user server runs here\n"))
	})
}
