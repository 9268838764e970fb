package bench

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/gpuhub/gpuhub/services/internal/benchkit"
	"github.com/gpuhub/gpuhub/services/internal/contract"
	"github.com/gpuhub/gpuhub/services/internal/gpu"
	"github.com/gpuhub/gpuhub/services/internal/server"
)

// Hub is the little of the Hub REST API the services ask outside the measured path: the version, the users
// and their groups (gpu-quota's directory, read at start), and who owns a token (hubauth: gpu-quota resolves
// gpu-profiles' token once, then caches it).
type Hub struct {
	Users int
	// Tokens are token -> Hub service name.
	Tokens map[string]string
}

// Handler serves the Hub API under /hub/api.
func (h Hub) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /hub/api/{$}", func(w http.ResponseWriter, _ *http.Request) {
		server.WriteJSON(w, http.StatusOK, map[string]string{"version": "5.5.0"})
	})
	mux.HandleFunc("GET /hub/api/user", func(w http.ResponseWriter, r *http.Request) {
		tok := strings.TrimPrefix(r.Header.Get("Authorization"), "token ")
		name, ok := h.Tokens[tok]
		if !ok {
			server.WriteError(w, http.StatusForbidden, "Missing or invalid credentials.")
			return
		}
		server.WriteJSON(w, http.StatusOK, map[string]any{"kind": "service", "name": name, "admin": false, "scopes": []string{}})
	})
	mux.HandleFunc("GET /hub/api/users", func(w http.ResponseWriter, r *http.Request) {
		if _, ok := h.Tokens[strings.TrimPrefix(r.Header.Get("Authorization"), "token ")]; !ok {
			server.WriteError(w, http.StatusForbidden, "Missing or invalid credentials.")
			return
		}
		offset, _ := strconv.Atoi(r.URL.Query().Get("offset"))
		limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
		if limit <= 0 {
			limit = 200
		}
		end := min(offset+limit, h.Users)
		items := make([]map[string]any, 0, max(end-offset, 0))
		for i := offset; i < end; i++ {
			items = append(items, map[string]any{"kind": "user", "name": benchkit.UserName(i), "admin": false,
				"groups": []string{benchkit.Group(i)}, "servers": map[string]any{}})
		}
		var next any
		if end < h.Users {
			next = map[string]int{"offset": end, "limit": limit}
		}
		server.WriteJSON(w, http.StatusOK, map[string]any{"items": items,
			"_pagination": map[string]any{"offset": offset, "limit": limit, "total": h.Users, "next": next}})
	})
	return mux
}

// UsagePrefix is the usage API's prefix, as the Hub gives it.
const UsagePrefix = "/services/gpu-usage/"

// Advice is the little of the usage API gpu-profiles asks: every user's right-size advice (GET
// users/{name}/right-size), one server of each user advised from a MIG 3g.20gb down to a 1g.5gb of the same A100
// (classes the synthetic cluster offers). The answers come off the render path (adviceclient fetches them in the
// background), so B7's renders carry the mark at the cost they have in production.
func Advice() http.Handler {
	const a100 = "A100-SXM4-40GB"
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+UsagePrefix+"api/v1/users/{name}/right-size", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		server.WriteJSON(w, http.StatusOK, contract.RightSizeResponse{User: name, Period: "7d", Servers: []contract.RightSize{{
			User: name, Verdict: contract.VerdictSmaller, Caveats: []string{},
			Held: contract.RightSizeKind{Kind: gpu.KindMIG, Class: "mig " + a100 + " 3g.20gb", Description: "MIG 3g.20gb on an A100, 3/7 of a GPU"},
			Candidates: []contract.RightSizeCandidate{{RightSizeKind: contract.RightSizeKind{Kind: gpu.KindMIG, Class: "mig " + a100 + " 1g.5gb",
				Description: "MIG 1g.5gb on an A100, 1/7 of a GPU"}, SavedPerHour: 2.0 / 7}},
			Evidence: contract.RightSizeEvidence{BusySeconds: 6 * 3600, HeldSeconds: 20 * 3600, PeakMemoryBytes: 3 << 30, P95SMUtilPercent: 20},
		}}})
	})
	return mux
}
