package pass

import (
	"net/http"
	"strings"
)

// CountHubRequests wraps the transport of the pass's Hub client so that every request the Hub sees, retries
// included, is counted in hub_requests_total by operation: users_list (a page of the ready list), user_get (one
// user with a server that may need an action) and server_stop, the names hubapi's own metrics use; anything
// else is "other". B3 checks a pass costs at most pages + stops.
func (m *Metrics) CountHubRequests(next http.RoundTripper) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		m.hubRequests.WithLabelValues(hubOp(req.Method, req.URL.Path)).Inc()
		return next.RoundTrip(req)
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// hubOp names a Hub API request by its method and path (…/hub/api/users, …/users/{name}/server[s/{name}]).
func hubOp(method, path string) string {
	path = strings.TrimSuffix(path, "/")
	switch {
	case method == http.MethodGet && strings.HasSuffix(path, "/users"):
		return "users_list"
	case method == http.MethodDelete && strings.Contains(path, "/users/") &&
		(strings.HasSuffix(path, "/server") || strings.Contains(path, "/servers/")):
		return "server_stop"
	case method == http.MethodGet && strings.Count(path[strings.LastIndex(path, "/users/")+1:], "/") == 1 &&
		strings.Contains(path, "/users/"):
		return "user_get"
	}
	return "other"
}
