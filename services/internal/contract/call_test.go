package contract

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestCaller(t *testing.T) {
	const token = "s3cret-token"
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ok", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "token "+token {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		_, _ = w.Write([]byte(`{"version":3}`))
	})
	mux.HandleFunc("PUT /echo", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Content-Type") != "application/json" || r.Header.Get("If-Match") != `"2"` {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusPreconditionFailed)
	})
	mux.HandleFunc("GET /refused", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(`{"status":403,"message":"list this service in --reader-services"}`))
	})
	mux.HandleFunc("GET /proxy", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadGateway)
		_, _ = w.Write([]byte("<html>\n  <body>Bad gateway</body>\n</html>"))
	})
	mux.HandleFunc("GET /login", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/hub/login", http.StatusFound)
	})
	mux.HandleFunc("GET /hub/login", func(w http.ResponseWriter, r *http.Request) {
		t.Error("the redirect was followed (with the token)")
	})
	mux.HandleFunc("GET /big", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(strings.Repeat("x", 101)))
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	c := Caller{Token: token}
	ctx := context.Background()

	var got struct{ Version int }
	if err := c.JSON(ctx, http.MethodGet, srv.URL+"/ok", nil, &got); err != nil || got.Version != 3 {
		t.Errorf("ok: %+v, %v", got, err)
	}
	a, err := c.Do(ctx, http.MethodPut, srv.URL+"/echo", map[string]int{"state": 1}, http.Header{"If-Match": {`"2"`}})
	if err != nil || a.Status != http.StatusPreconditionFailed {
		t.Errorf("put: %+v, %v", a, err)
	}
	for _, tc := range []struct {
		path, want string
		status     int
	}{
		{"/refused", "403 Forbidden: list this service in --reader-services", 403},
		{"/proxy", "502 Bad Gateway: <html> <body>Bad gateway</body> </html>", 502},
		{"/login", "302 Found (redirected to /hub/login: check the URL)", 302},
	} {
		err := c.JSON(ctx, http.MethodGet, srv.URL+tc.path, nil, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !IsStatus(err, tc.status) {
			t.Errorf("%s: %v, want ...%s (status %d)", tc.path, err, tc.want, tc.status)
		}
		if err != nil && strings.Contains(err.Error(), token) {
			t.Errorf("%s: the error shows the token: %v", tc.path, err)
		}
	}
	if _, err := (Caller{Token: token, Limit: 100}).Do(ctx, http.MethodGet, srv.URL+"/big", nil, nil); !errors.Is(err, ErrTooLong) {
		t.Errorf("big: %v, want ErrTooLong", err)
	}

	var logged strings.Builder
	slog.New(slog.NewTextHandler(&logged, nil)).Info("calling", "caller", c)
	for _, s := range []string{logged.String(), fmt.Sprint(c), fmt.Sprintf("%v %+v", c, c)} {
		if strings.Contains(s, token) {
			t.Errorf("the token shows: %s", s)
		}
	}
}

// TestNewHTTPClientKeepsConnectionsForBursts: a second burst of calls to a service reuses the first burst's
// connections. With net/http's default (2 idle per host) 30 of 32 calls dialed again.
func TestNewHTTPClientKeepsConnectionsForBursts(t *testing.T) {
	const burst = 32
	var (
		dials   atomic.Int64
		arrived sync.WaitGroup
	)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		// Every call of a burst waits for the others, so the burst holds 32 connections at once.
		arrived.Done()
		arrived.Wait()
		_, _ = io.WriteString(w, "ok")
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			dials.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()

	client := NewHTTPClient(10 * time.Second)
	var newPerBurst []int64
	for range 2 {
		before := dials.Load()
		arrived.Add(burst)
		var calls sync.WaitGroup
		for range burst {
			calls.Go(func() {
				req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL, nil)
				resp, err := client.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			})
		}
		calls.Wait()
		newPerBurst = append(newPerBurst, dials.Load()-before)
	}
	if diff := cmp.Diff([]int64{burst, 0}, newPerBurst); diff != "" {
		t.Errorf("connections dialed per burst of %d calls (-want +got):\n%s", burst, diff)
	}
}
