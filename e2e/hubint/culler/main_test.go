//go:build integration

package culler_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuhub/gpuhub/e2e/gpuhubstack"
	"github.com/gpuhub/gpuhub/e2e/hubint/hubtest"
	"github.com/gpuhub/gpuhub/e2e/internal/hubproc"
)

const (
	chartDir = "../../../chart/gpuhub"
	password = "hubint-culler"
	// cullerService is the Hub service name the chart registers (culler.serviceName) and the glue looks for.
	cullerService = "gpu-culler"
	// stopsPrefix is where gpu-culler serves each user's last stop under its service prefix (C3).
	stopsPrefix = "/services/" + cullerService + "/api/v1/stops/"
)

// cullerScopes are the Hub scopes of the chart's hub.loadRoles.gpu-culler (chart/README.md; chart/culler_test.go
// checks the README against the same list): the four, jupyterhub-idle-culler's set.
var cullerScopes = []string{"list:users", "read:users:activity", "read:servers", "delete:servers"}

var (
	hub    *hubtest.Hub
	culler *fakeCuller
	// users of the Hub: alice, bob and carol get servers; dave and erin never do.
	users = []string{"alice", "bob", "carol", "dave", "erin"}
)

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	for _, k := range []string{hubproc.EnvVenv, hubproc.EnvCHP} {
		if os.Getenv(k) == "" {
			fmt.Fprintf(os.Stderr, "hubint/culler: %s is not set; run `make integration`, which installs what these tests need\n", k)
			return 1
		}
	}
	var err error
	if culler, err = startFakeCuller(); err != nil {
		fmt.Fprintf(os.Stderr, "hubint/culler: %v\n", err)
		return 1
	}
	defer culler.close()
	glue, err := os.ReadFile(chartDir + "/" + gpuhubstack.GlueFile)
	if err != nil {
		fmt.Fprintf(os.Stderr, "hubint/culler: %v\n", err)
		return 1
	}
	opts := hubproc.OptionsFromEnv()
	opts.Users = users
	opts.Password = password
	opts.Services = []hubproc.Service{{Name: cullerService, Token: culler.token, URL: culler.url(), Scopes: cullerScopes}}
	// As the chart's README has z2jh do: users reach gpu-culler (the panel); the glue does not need it.
	opts.Roles = []hubproc.Role{{Name: "user", Description: "default user role plus gpu-culler",
		Scopes: []string{"self", "access:services!service=" + cullerService}}}
	// The glue as z2jh loads it (hub.extraConfig, after the services are configured). Starts and stops answer at
	// once (202) and go on in the background, as under z2jh.
	opts.ExtraConfig = "c.JupyterHub.tornado_settings = {\"slow_spawn_timeout\": 0, \"slow_stop_timeout\": 0.1}\n" + string(glue)

	start := time.Now()
	h, err := hubproc.Start(context.Background(), opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "hubint/culler: %v\n", err)
		return 1
	}
	hub = &hubtest.Hub{Name: "culler", Proc: h, Password: password}
	fmt.Printf("hubint/culler: jupyterhub %s (%s) ready in %s\n", h.Version(), opts.Venv, time.Since(start).Round(time.Millisecond))
	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "hubint/culler: jupyterhub %s log %s (tail):\n%s\n", h.Version(), h.LogPath(), h.LogTail(80))
	}
	if err := h.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "hubint/culler: stop: %v\n", err)
		code = 1
	}
	return code
}

// fakeCuller plays gpu-culler's api/v1/stops/{user} for the glue: a fixed answer per user, the token checked as
// gpu-culler checks it (its own Hub token), and modes for the failures the home page must survive.
type fakeCuller struct {
	token string
	addr  string

	mu       sync.Mutex
	srv      *http.Server
	mode     string                     // "ok", "slow" (answers after 5 s), "error" (500)
	stops    map[string]json.RawMessage // user -> lastStop
	requests []string                   // users asked for, with the token right
	badAuth  int                        // requests without gpu-culler's token
}

func startFakeCuller() (*fakeCuller, error) {
	f := &fakeCuller{token: gpuhubstack.NewToken(), mode: "ok", stops: map[string]json.RawMessage{}}
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f.addr = l.Addr().String()
	f.serve(l)
	return f, nil
}

func (f *fakeCuller) url() string { return "http://" + f.addr }

func (f *fakeCuller) serve(l net.Listener) {
	srv := &http.Server{Handler: http.HandlerFunc(f.handle), ReadHeaderTimeout: 5 * time.Second}
	f.mu.Lock()
	f.srv = srv
	f.mu.Unlock()
	go func() { _ = srv.Serve(l) }()
}

// down closes the listener: connections are refused until up.
func (f *fakeCuller) down() {
	f.mu.Lock()
	srv := f.srv
	f.mu.Unlock()
	_ = srv.Close()
}

// up listens again on the same address (the Hub keeps the URL it resolved).
func (f *fakeCuller) up() error {
	var l net.Listener
	var err error
	for range 50 {
		if l, err = (&net.ListenConfig{}).Listen(context.Background(), "tcp", f.addr); err == nil {
			f.serve(l)
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("listen again on %s: %w", f.addr, err)
}

func (f *fakeCuller) close() { f.down() }

func (f *fakeCuller) setMode(m string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mode = m
}

func (f *fakeCuller) setStop(user string, lastStop any) {
	b, _ := json.Marshal(lastStop)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stops[user] = b
}

// asked returns the users asked for since the last call, and the number of requests with a wrong token.
func (f *fakeCuller) asked() ([]string, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, bad := f.requests, f.badAuth
	f.requests, f.badAuth = nil, 0
	return r, bad
}

func (f *fakeCuller) handle(w http.ResponseWriter, r *http.Request) {
	user, ok := strings.CutPrefix(r.URL.Path, stopsPrefix)
	if !ok {
		// JupyterHub 6 waits at startup until each service with a url answers.
		w.WriteHeader(http.StatusOK)
		return
	}
	f.mu.Lock()
	mode, stop := f.mode, f.stops[user]
	if r.Header.Get("Authorization") != "token "+f.token {
		f.badAuth++
		f.mu.Unlock()
		http.Error(w, `{"message":"not gpu-culler's token"}`, http.StatusForbidden)
		return
	}
	f.requests = append(f.requests, user)
	f.mu.Unlock()
	switch mode {
	case "slow":
		select {
		case <-time.After(5 * time.Second):
		case <-r.Context().Done():
			return
		}
	case "error":
		http.Error(w, `{"message":"boom"}`, http.StatusInternalServerError)
		return
	}
	if stop == nil {
		stop = json.RawMessage("null")
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = fmt.Fprintf(w, `{"lastStop":%s}`, stop)
}
