// Package hubapitest is a fake JupyterHub 5.5 REST API for unit tests.
package hubapitest

import (
	"net/http/httptest"
	"testing"

	"github.com/gpuhub/gpuhub/hubapi"
)

// Hub is a fake JupyterHub API server.
type Hub struct {
	srv *httptest.Server
}

// New starts a fake Hub on loopback, closed when the test ends.
func New(t testing.TB) *Hub {
	h := &Hub{srv: httptest.NewServer(nil)}
	t.Cleanup(h.srv.Close)
	return h
}

// URL returns the API root, ".../hub/api".
func (h *Hub) URL() string { return h.srv.URL + "/hub/api" }

// AddUser adds or replaces a user.
func (h *Hub) AddUser(u hubapi.User) {}

// AddGroup adds or replaces a group.
func (h *Hub) AddGroup(g hubapi.Group) {}

// AddToken registers token for owner (a user or a service) with scopes.
func (h *Hub) AddToken(token, owner string, scopes ...string) {}
