package waitlist

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestStatus(t *testing.T) {
	location = time.UTC
	now := time.Date(2026, 11, 27, 15, 0, 0, 0, time.UTC)
	answer := `{"places":[
	 {"user":"bob","server":"gpu","class":"gpu H100-80GB-HBM3","description":"H100","state":"held","position":0,"waiting":1,
	  "joinedAt":"2026-11-27T14:20:00Z","heldUntil":"2026-11-27T15:08:00Z","autoStart":true,"fairShare":0.9},
	 {"user":"alice","server":"","class":"gpu H100-80GB-HBM3","description":"H100","state":"waiting","position":1,"waiting":1,
	  "joinedAt":"2026-11-27T14:21:00Z","estimate":"2026-11-27T15:30:00Z","fairShare":0.2,"blocked":"GPU-hour budget spent"},
	 {"user":"dave","server":"","class":"gpu H100-80GB-HBM3","state":"started","startedAt":"2026-11-27T14:50:00Z"}]}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path != "/services/gpu-quota/api/v1/waitlist":
			w.WriteHeader(http.StatusNotFound)
		case r.Header.Get("Authorization") != "token admin-token":
			w.WriteHeader(http.StatusForbidden)
		default:
			_, _ = w.Write([]byte(answer))
		}
	}))
	defer srv.Close()
	write := func(src Source) (string, error) {
		var out bytes.Buffer
		err := WriteWaitlist(context.Background(), &out, src, now)
		return out.String(), err
	}
	base := srv.URL + "/services/gpu-quota/"
	out, err := write(Source{URL: base, Token: "admin-token", TokenFrom: "JUPYTERHUB_API_TOKEN"})
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("UPDATE_GOLDEN") != "" {
		_ = os.WriteFile("testdata/status.golden", []byte(out), 0o644)
	}
	want, err := os.ReadFile("testdata/status.golden")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), out); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
	tests := map[string]struct {
		src  Source
		want string
	}{
		"a user's token":  {Source{URL: base, Token: "user-token", TokenFrom: "--token-file t"}, "only Hub admins may read every queue: use an admin's token in --token-file t"},
		"not gpu-quota":   {Source{URL: srv.URL + "/nope", Token: "admin-token"}, "no waitlist at " + srv.URL + "/nope/"},
		"nothing answers": {Source{URL: "http://127.0.0.1:1/", Token: "admin-token"}, "does not answer"},
		"not a URL":       {Source{URL: "::", Token: "admin-token"}, "--quota-url"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := write(tc.src)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("WriteWaitlist: %v, want an error with %q", err, tc.want)
			}
		})
	}
}
