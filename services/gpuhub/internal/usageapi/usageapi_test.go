package usageapi

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestGet: each answer becomes the data or an error that says what to do; the token goes in the header only.
func TestGet(t *testing.T) {
	tests := map[string]struct {
		status      int
		body        string
		wantItems   []string
		wantErr     string // a part of the error; empty: none
		wantMessage string // a 404's Message
	}{
		"ok":                {status: 200, body: `{"items":["a","b"]}`, wantItems: []string{"a", "b"}},
		"unknown token":     {status: 401, wantErr: "the Hub does not know the token in --token-file t: make a new one"},
		"forbidden":         {status: 403, body: `{"message":"admins only"}`, wantErr: "refuses the token in --token-file t (admins only): use an admin's token"},
		"forbidden plain":   {status: 403, wantErr: "(403 Forbidden): use an admin's token"},
		"not found":         {status: 404, body: "404 page not found", wantErr: "(404 for api/v1/things): check --usage-url"},
		"no such item":      {status: 404, body: `{"message":"no user \"zoe\""}`, wantErr: "no usage API at", wantMessage: `no user "zoe"`},
		"unavailable":       {status: 503, body: `{"message":"the ledger is away"}`, wantErr: "cannot answer just now (the ledger is away): try again in a minute"},
		"other":             {status: 500, body: "boom\n", wantErr: "the usage API answered 500 Internal Server Error for api/v1/things: boom"},
		"not the usage API": {status: 200, body: "<html>", wantErr: "is not the usage API's"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if got := r.Header.Get("Authorization"); got != "token secret" {
					t.Errorf("Authorization = %q", got)
				}
				if got, want := r.URL.String(), "/prefix/api/v1/things?limit=2"; got != want {
					t.Errorf("URL = %s, want %s", got, want)
				}
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
			}))
			defer srv.Close()
			c := &Client{HTTP: srv.Client(), Base: srv.URL + "/prefix/", Token: "secret", TokenFrom: "--token-file t",
				Forbidden: "use an admin's token"}
			var got struct {
				Items []string `json:"items"`
			}
			err := c.Get(t.Context(), "api/v1/things", url.Values{"limit": {"2"}}, &got)
			if tc.wantErr == "" && err != nil {
				t.Fatalf("Get: %v", err)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("Get error = %v, want it to contain %q", err, tc.wantErr)
			}
			if err != nil && strings.Contains(err.Error(), "secret") {
				t.Errorf("the error shows the token: %v", err)
			}
			if diff := cmp.Diff(tc.wantItems, got.Items); diff != "" {
				t.Errorf("items (-want +got):\n%s", diff)
			}
			var nf *NotFoundError
			if errors.As(err, &nf) && nf.Message != tc.wantMessage {
				t.Errorf("404 message = %q, want %q", nf.Message, tc.wantMessage)
			}
		})
	}
}
