package bench

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/gpuhub/gpuhub/services/internal/benchkit"
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
