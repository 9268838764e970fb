package hubapi

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// ListUsersOptions selects and pages GET /users.
type ListUsersOptions struct {
	// State filters servers: "" (all users), "active", "ready" or "inactive".
	State string
	// IncludeStoppedServers asks for stopped named servers too (include_stopped_servers).
	IncludeStoppedServers bool
	// PageSize is the limit per page, default 200 (the Hub's api_page_max_limit caps it).
	PageSize int
	// Sort is the Hub's sort key (5.0+), e.g. "id", "name", "last_activity".
	Sort string
}

// User is the Hub's user model. Fields are filtered by the scopes of the token
// that read it: without read:servers Servers is nil, without
// read:users:groups Groups is nil, and so on.
type User struct {
	Kind         string            `json:"kind"`
	Name         string            `json:"name"`
	Admin        bool              `json:"admin"`
	Roles        []string          `json:"roles,omitempty"`
	Groups       []string          `json:"groups,omitempty"`
	Server       string            `json:"server,omitempty"`  // URL of the default server; "" when the Hub sends null
	Pending      string            `json:"pending,omitempty"` // "spawn", "stop" or "" (null)
	Created      *time.Time        `json:"created,omitempty"`
	LastActivity *time.Time        `json:"last_activity,omitempty"`
	Servers      map[string]Server `json:"servers,omitempty"` // keyed by server name, "" = default
	// Scopes, SessionID and TokenID are only set by GET /user (whoami).
	Scopes    []string `json:"scopes,omitempty"`
	SessionID string   `json:"session_id,omitempty"`
	TokenID   string   `json:"token_id,omitempty"`
}

// Server is the Hub's server model.
type Server struct {
	Name         string         `json:"name"`
	Ready        bool           `json:"ready"`
	Pending      string         `json:"pending,omitempty"` // "spawn", "stop" or "" (null)
	Stopped      bool           `json:"stopped"`
	URL          string         `json:"url,omitempty"`
	ProgressURL  string         `json:"progress_url,omitempty"`
	Started      *time.Time     `json:"started,omitempty"`
	LastActivity *time.Time     `json:"last_activity,omitempty"`
	UserOptions  map[string]any `json:"user_options,omitempty"`
	// State needs admin:server_state; KubeSpawner puts pod_name and namespace here.
	State map[string]any `json:"state,omitempty"`
}

// Group is the Hub's group model.
type Group struct {
	Kind       string         `json:"kind,omitempty"`
	Name       string         `json:"name"`
	Users      []string       `json:"users,omitempty"`
	Roles      []string       `json:"roles,omitempty"`
	Properties map[string]any `json:"properties,omitempty"`
}

// TokenRequest is the body of POST /users/{name}/tokens.
type TokenRequest struct {
	ExpiresIn int      `json:"expires_in,omitempty"` // seconds; 0 = never
	Note      string   `json:"note,omitempty"`
	Scopes    []string `json:"scopes,omitempty"` // empty = the owner's default token scopes
}

// Token is the Hub's token model. Token (the secret) is only set right after
// creation; it is never logged.
type Token struct {
	ID      string     `json:"id"`
	Token   string     `json:"token,omitempty"`
	User    string     `json:"user,omitempty"`
	Service string     `json:"service,omitempty"`
	Scopes  []string   `json:"scopes,omitempty"`
	Created *time.Time `json:"created,omitempty"`
	Expires *time.Time `json:"expires_at,omitempty"`
	Note    string     `json:"note,omitempty"`
}

// String redacts the secret so a Token can be printed with %v.
func (t Token) String() string {
	return fmt.Sprintf("Token{ID:%s User:%s Note:%q Scopes:%v}", t.ID, t.User, t.Note, t.Scopes)
}

// GoString keeps %#v from printing the secret too.
func (t Token) GoString() string { return t.String() }

// Activity is the body of POST /users/{name}/activity.
type Activity struct {
	// LastActivity of the user; zero means "not reported".
	LastActivity time.Time
	// Servers maps server name ("" = default) to its last activity.
	Servers map[string]time.Time
}

// StartResult reports the outcome of StartServer.
type StartResult struct {
	Pending bool // true on 202: the spawn goes on in the background
}

// StopResult reports the outcome of StopServer.
type StopResult struct {
	Pending bool // true on 202: the server is still stopping
}

// Version is the body of GET / on the Hub API.
type versionInfo struct {
	Version string `json:"version"`
}

// hubTime parses the Hub's ISO-8601 timestamps: UTC with "Z", fraction
// optional. Older Hubs and some spawners write naive times; treat those as UTC.
type hubTime struct{ t *time.Time }

var hubTimeLayouts = []string{
	time.RFC3339Nano,                // 2026-11-22T10:00:05.123456Z, 2026-11-22T10:00:05Z
	"2006-01-02T15:04:05.999999999", // naive, fraction optional
}

func (h *hubTime) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		h.t = nil
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("hub timestamp: %w", err)
	}
	if s == "" {
		h.t = nil
		return nil
	}
	t, err := parseHubTime(s)
	if err != nil {
		return err
	}
	h.t = &t
	return nil
}

func parseHubTime(s string) (time.Time, error) {
	var firstErr error
	for _, layout := range hubTimeLayouts {
		t, err := time.Parse(layout, strings.TrimSpace(s))
		if err == nil {
			return t.UTC(), nil
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	return time.Time{}, fmt.Errorf("hub timestamp %q: %w", s, firstErr)
}

// UnmarshalJSON accepts the Hub's timestamp forms (null for string fields is a no-op in encoding/json).
func (u *User) UnmarshalJSON(b []byte) error {
	type plain User
	aux := struct {
		*plain
		Created      hubTime `json:"created"`
		LastActivity hubTime `json:"last_activity"`
	}{plain: (*plain)(u)}
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	u.Created = aux.Created.t
	u.LastActivity = aux.LastActivity.t
	return nil
}

// UnmarshalJSON accepts the Hub's timestamp forms (null for string fields is a no-op in encoding/json).
func (s *Server) UnmarshalJSON(b []byte) error {
	type plain Server
	aux := struct {
		*plain
		Started      hubTime `json:"started"`
		LastActivity hubTime `json:"last_activity"`
	}{plain: (*plain)(s)}
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	s.Started = aux.Started.t
	s.LastActivity = aux.LastActivity.t
	return nil
}

// UnmarshalJSON accepts the Hub's timestamp forms.
func (t *Token) UnmarshalJSON(b []byte) error {
	type plain Token
	aux := struct {
		*plain
		Created hubTime `json:"created"`
		Expires hubTime `json:"expires_at"`
	}{plain: (*plain)(t)}
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	t.Created = aux.Created.t
	t.Expires = aux.Expires.t
	return nil
}
