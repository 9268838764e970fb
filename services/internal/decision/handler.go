package decision

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Limits of a listing: DefaultListLimit records when the query says none, at most MaxListLimit.
const (
	DefaultListLimit = 100
	MaxListLimit     = 10_000
)

// ParseFilter reads a Filter from a decisions query: user, action, since (RFC 3339) and limit (default
// DefaultListLimit, at most MaxListLimit). Errors say which parameter is wrong and what it takes.
func ParseFilter(q url.Values) (Filter, error) {
	f := Filter{User: q.Get("user"), Action: q.Get("action"), Limit: DefaultListLimit}
	if s := q.Get("since"); s != "" {
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			return Filter{}, fmt.Errorf("since=%q: write a time as RFC 3339, such as 2026-11-23T14:30:00Z", s)
		}
		f.Since = t
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxListLimit {
			return Filter{}, fmt.Errorf("limit=%q: a whole number from 1 to %d", s, MaxListLimit)
		}
		f.Limit = n
	}
	return f, nil
}

// List is the JSON body of a decisions listing.
type List struct {
	Decisions []Record `json:"decisions"`
}

// Handler answers GET with the records that match the query (ParseFilter), newest first:
// {"decisions":[...]}. It authenticates nothing: the service wraps it with its own checks.
func (l *Log) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		f, err := ParseFilter(r.URL.Query())
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(map[string]any{"status": http.StatusBadRequest, "message": err.Error()})
			return
		}
		out := List{Decisions: l.List(f)}
		if out.Decisions == nil {
			out.Decisions = []Record{}
		}
		_ = json.NewEncoder(w).Encode(out)
	})
}
