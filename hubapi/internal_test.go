package hubapi

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 22, 11, 0, 0, 0, time.UTC)
	cases := map[string]struct {
		in   string
		want time.Duration
	}{
		"empty":       {in: "", want: 0},
		"seconds":     {in: "5", want: 5 * time.Second},
		"spaces":      {in: " 2 ", want: 2 * time.Second},
		"negative":    {in: "-1", want: 0},
		"date":        {in: now.Add(90 * time.Second).Format(http.TimeFormat), want: 90 * time.Second},
		"past date":   {in: now.Add(-time.Minute).Format(http.TimeFormat), want: 0},
		"nonsense":    {in: "soon", want: 0},
		"fractional":  {in: "1.5", want: 0},
		"zero":        {in: "0", want: 0},
		"big seconds": {in: "3600", want: time.Hour},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := parseRetryAfter(tc.in, now); got != tc.want {
				t.Errorf("parseRetryAfter(%q) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
}

func TestUserJSONFromHub(t *testing.T) {
	cases := map[string]struct {
		in   string
		want User
	}{
		"no default server, no servers dict": {
			in: `{"kind":"user","name":"alice","admin":false,"roles":["user"],"groups":[],"server":null,
				"pending":null,"created":"2026-11-22T10:00:00Z","last_activity":null,"auth_state":null}`,
			want: User{Kind: "user", Name: "alice", Roles: []string{"user"}, Groups: []string{},
				Created: ptr(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))},
		},
		"microseconds and servers": {
			in: `{"kind":"user","name":"bob","server":"/user/bob/","pending":"spawn",
				"last_activity":"2026-11-22T10:00:05.123456Z",
				"servers":{"":{"name":"","full_name":"bob/","last_activity":"2026-11-22T10:00:05Z","started":"2026-11-22T09:00:00.5Z",
				"pending":null,"ready":true,"stopped":false,"url":"/user/bob/","user_options":{},
				"progress_url":"/hub/api/users/bob/server/progress","full_url":null,"full_progress_url":null,
				"state":{"pod_name":"jupyter-bob","namespace":"jhub"}}}}`,
			want: User{Kind: "user", Name: "bob", Server: "/user/bob/", Pending: "spawn",
				LastActivity: ptr(time.Date(2026, 11, 22, 10, 0, 5, 123456000, time.UTC)),
				Servers: map[string]Server{"": {
					Name: "", Ready: true, URL: "/user/bob/", ProgressURL: "/hub/api/users/bob/server/progress",
					LastActivity: ptr(time.Date(2026, 11, 22, 10, 0, 5, 0, time.UTC)),
					Started:      ptr(time.Date(2026, 11, 22, 9, 0, 0, 500000000, time.UTC)),
					UserOptions:  map[string]any{},
					State:        map[string]any{"pod_name": "jupyter-bob", "namespace": "jhub"},
				}}},
		},
		"naive timestamp and whoami fields": {
			in: `{"kind":"user","name":"carol","created":"2026-11-22T10:00:00.25","scopes":["read:users!user=carol"],
				"session_id":null,"token_id":"a17"}`,
			want: User{Kind: "user", Name: "carol", Created: ptr(time.Date(2026, 11, 22, 10, 0, 0, 250000000, time.UTC)),
				Scopes: []string{"read:users!user=carol"}, TokenID: "a17"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var got User
			if err := json.Unmarshal([]byte(tc.in), &got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestBadTimestamp(t *testing.T) {
	var u User
	if err := json.Unmarshal([]byte(`{"name":"x","created":"yesterday"}`), &u); err == nil {
		t.Error("want error for a bad timestamp")
	}
}

func TestTokenJSON(t *testing.T) {
	in := `{"user":"alice","id":"a12","kind":"api_token","roles":[],"scopes":["self"],"created":"2026-11-22T10:00:00Z",
		"last_activity":null,"expires_at":"2026-11-22T11:00:00Z","note":"e2e","session_id":null,"token":"s3cr3t"}`
	var got Token
	if err := json.Unmarshal([]byte(in), &got); err != nil {
		t.Fatal(err)
	}
	want := Token{ID: "a12", Token: "s3cr3t", User: "alice", Scopes: []string{"self"}, Note: "e2e",
		Created: ptr(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)),
		Expires: ptr(time.Date(2026, 11, 22, 11, 0, 0, 0, time.UTC))}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func ptr[T any](v T) *T { return &v }
