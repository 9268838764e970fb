// Package hubapi is a typed client for the JupyterHub REST API (5.5 baseline,
// 6.x compatible). Every Hub call of gpuhub goes through it: pagination,
// retries with backoff, a concurrency cap, typed errors and token hygiene.
package hubapi

import (
	"context"
	"errors"
	"iter"
	"log/slog"
	"net/http"
	"time"
)

// Config configures a Client. Its String and LogValue redact the token.
type Config struct {
	URL           string        // e.g. http://127.0.0.1:8081/hub/api (JUPYTERHUB_API_URL); trailing slash tolerated
	Token         string        // JUPYTERHUB_API_TOKEN; sent as "Authorization: token <t>"; never logged
	Timeout       time.Duration // per request attempt, default 10s
	MaxConcurrent int           // cap of in-flight requests, default 8
	MaxRetries    int           // on 429/5xx/transport errors for idempotent requests, default 4
	HTTPClient    *http.Client  // optional
	Logger        *slog.Logger  // optional
	UserAgent     string
}

// Client talks to one Hub with one token. It is safe for concurrent use.
type Client struct {
	cfg Config
}

var errTODO = errors.New("hubapi: not implemented yet")

// ConfigFromEnv reads JUPYTERHUB_API_URL and JUPYTERHUB_API_TOKEN.
func ConfigFromEnv() Config { return Config{} }

// New validates cfg and returns a Client. Errors never contain the token.
func New(cfg Config) (*Client, error) { return nil, errTODO }

// Version returns the Hub's version from GET / (no auth needed), e.g. "5.5.0".
func (c *Client) Version(ctx context.Context) (string, error) { return "", errTODO }

// WhoAmI returns the model of the client's own token owner (GET /user).
func (c *Client) WhoAmI(ctx context.Context) (*User, error) { return nil, errTODO }

// WhoAmIWithToken returns the owner of another token (GET /user with that token).
func (c *Client) WhoAmIWithToken(ctx context.Context, token string) (*User, error) {
	return nil, errTODO
}

// Users iterates GET /users page by page, de-duplicated by name.
func (c *Client) Users(ctx context.Context, opts ListUsersOptions) iter.Seq2[User, error] {
	return func(yield func(User, error) bool) { yield(User{}, errTODO) }
}

// ListUsers collects Users.
func (c *Client) ListUsers(ctx context.Context, opts ListUsersOptions) ([]User, error) {
	return nil, errTODO
}

// GetUser returns one user (GET /users/{name}).
func (c *Client) GetUser(ctx context.Context, name string) (*User, error) { return nil, errTODO }

// Groups iterates GET /groups page by page, de-duplicated by name.
func (c *Client) Groups(ctx context.Context) iter.Seq2[Group, error] {
	return func(yield func(Group, error) bool) { yield(Group{}, errTODO) }
}

// ListGroups collects Groups.
func (c *Client) ListGroups(ctx context.Context) ([]Group, error) { return nil, errTODO }

// GetGroup returns one group (GET /groups/{name}).
func (c *Client) GetGroup(ctx context.Context, name string) (*Group, error) { return nil, errTODO }

// AddGroupMembers adds users to a group (POST /groups/{name}/users).
func (c *Client) AddGroupMembers(ctx context.Context, group string, users ...string) error {
	return errTODO
}

// StartServer starts a server; server "" is the default server.
func (c *Client) StartServer(ctx context.Context, user, server string, options map[string]any) (StartResult, error) {
	return StartResult{}, errTODO
}

// StopServer stops a server; remove deletes a named server too.
func (c *Client) StopServer(ctx context.Context, user, server string, remove bool) (StopResult, error) {
	return StopResult{}, errTODO
}

// CreateToken mints a token for user (POST /users/{name}/tokens).
func (c *Client) CreateToken(ctx context.Context, user string, req TokenRequest) (*Token, error) {
	return nil, errTODO
}

// NotifyActivity reports activity (POST /users/{name}/activity).
func (c *Client) NotifyActivity(ctx context.Context, user string, a Activity) error { return errTODO }
