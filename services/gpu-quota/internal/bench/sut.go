package bench

import (
	"context"
	"encoding/json"
	"errors"
	"iter"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"

	"github.com/gpuhub/gpuhub/hubapi"
	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/admit"
	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/app"
	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/quota"
	"github.com/gpuhub/gpuhub/services/internal/benchkit"
	"github.com/gpuhub/gpuhub/services/internal/policy"
	"github.com/gpuhub/gpuhub/services/internal/server"
)

// Token is the admission token of the benchmark's gpu-quota.
const Token = "bench-admission-token"

// Directory lists that many synthetic users and their groups, as the Hub's GET /users would; it is read once
// at start and is not on the measured path.
type Directory int

// Users lists them.
func (d Directory) Users(context.Context, hubapi.ListUsersOptions) iter.Seq2[hubapi.User, error] {
	return func(yield func(hubapi.User, error) bool) {
		for i := range int(d) {
			if !yield(hubapi.User{Name: benchkit.UserName(i), Groups: []string{benchkit.Group(i)}}, nil) {
				return
			}
		}
	}
}

// SUTOptions configure both systems under test in one process.
type SUTOptions struct {
	Kube       kubernetes.Interface
	Namespace  string
	PolicyPath string
	UsageURL   string
	Users      int
	// Listener serves gpu-quota; NaiveListener serves the naive enforcer behind the same kind of server;
	// FloorListener serves the floor (Floor).
	Listener, NaiveListener, FloorListener net.Listener
	// Ready gets the engine once gpu-quota is ready (informers synced, usage read).
	Ready func(*admit.Engine)
	// AdvertiseURL, when set, runs gpu-quota as one of several replicas (--advertise-url): it campaigns for the
	// Lease as Identity, decides while it holds it and relays to the holder otherwise. The leader's enforcer is
	// left out, as it is of the single replica measured beside it: no admission waits on it.
	AdvertiseURL, Identity string
}

// ServeSUT runs the real gpu-quota service (app.Run: informers, engine, API, server) on Listener, or the naive
// enforcer behind the same HTTP server package on NaiveListener, until ctx ends. Each runs in a process of
// its own in the HTTP runs: the naive's LISTs of 10,000 pods grow a heap whose collections would otherwise
// land on gpu-quota's measurements.
//
// Both log as the chart runs gpu-quota (JSON at info, every decision a line), to /dev/null: what is measured
// includes encoding and writing the logs, not a terminal's speed.
func ServeSUT(ctx context.Context, o SUTOptions) error {
	devNull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer func() { _ = devNull.Close() }()
	logger := slog.New(slog.NewJSONHandler(devNull, &slog.HandlerOptions{Level: slog.LevelInfo}))
	// The naive enforcer and the floor each run beside gpu-quota, or alone (the HTTP runs start a process each).
	others := []struct {
		ln        net.Listener
		subsystem string
		handler   func() (http.Handler, error)
	}{
		{o.NaiveListener, "naive", func() (http.Handler, error) {
			var pol quota.Policy
			if err := policy.Load(o.PolicyPath, &pol); err != nil {
				return nil, err
			}
			return (&Naive{Client: o.Kube, Namespace: o.Namespace, Policy: &pol, Hours: SynthHours}).Handler(), nil
		}},
		{o.FloorListener, "floor", func() (http.Handler, error) { return Floor(), nil }},
	}
	var alone []*server.Server
	for _, other := range others {
		if other.ln == nil {
			continue
		}
		h, err := other.handler()
		if err != nil {
			return err
		}
		srv, err := server.New(server.Options{Listener: other.ln, Prefix: "/services/gpu-quota/", Registry: prometheus.NewRegistry(),
			Logger: logger, Subsystem: other.subsystem, Handler: h})
		if err != nil {
			return err
		}
		alone = append(alone, srv)
	}
	if o.Listener == nil {
		if len(alone) == 0 {
			return errors.New("sut: nothing to serve")
		}
		for _, srv := range alone[1:] {
			go func() { _ = srv.Run(ctx) }()
		}
		if o.Ready != nil {
			o.Ready(nil)
		}
		return alone[0].Run(ctx)
	}
	for _, srv := range alone {
		go func() { _ = srv.Run(ctx) }()
	}
	var srv *server.Server
	var eng *admit.Engine
	serving := make(chan struct{})
	errc := make(chan error, 1)
	opts := app.Options{
		Logger: logger, Registry: prometheus.NewRegistry(), Listener: o.Listener, Prefix: "/services/gpu-quota/",
		PolicyPath: o.PolicyPath, Kube: o.Kube, Namespace: o.Namespace, Hub: Directory(o.Users),
		Token: Token, Auth: func(h http.Handler) http.Handler { return h }, UsageURL: o.UsageURL,
		OnServing: func(s *server.Server, e *admit.Engine) { srv, eng = s, e; close(serving) },
	}
	if o.AdvertiseURL != "" {
		// The chart's Lease settings (client-go's defaults); the holder decides, the other relays to it.
		opts.AdvertiseURL, opts.Identity = o.AdvertiseURL, o.Identity
		opts.WhileLeader = func(ctx context.Context, _ app.Leading) { <-ctx.Done() }
	}
	go func() { errc <- app.Run(ctx, opts) }()
	select {
	case err := <-errc:
		return err
	case <-serving:
	}
	if err := benchkit.WaitReady(ctx, "http://"+srv.Addr().String()+"/readyz"); err != nil {
		return err
	}
	if o.Ready != nil {
		o.Ready(eng)
	}
	return <-errc
}

// Floor answers the admission request with the same server package (middleware, metrics, access log) and JSON
// as gpu-quota, and no decision: the request is decoded and a fixed admission written. Measured beside
// gpu-quota, it is what any Go service answering 64 spawns at once costs on the machine and its load generator;
// the difference is gpu-quota's engine.
func Floor() http.Handler {
	return admitHandler(func(context.Context, Request) (map[string]any, error) {
		return map[string]any{"allow": true, "reason": "ok", "message": "floor: no decision made"}, nil
	})
}

// Handler serves the naive enforcer with gpu-quota's admit request and answer shape.
func (n *Naive) Handler() http.Handler {
	return admitHandler(func(ctx context.Context, req Request) (map[string]any, error) {
		d, free, err := n.Admit(ctx, req)
		if err != nil {
			return nil, err
		}
		reason := string(d.Reason)
		if d.Allow && !free {
			reason = string(admit.ReasonNoneFree)
		}
		return map[string]any{"allow": d.Allow && free, "reason": reason, "message": d.Message}, nil
	})
}

// admitHandler serves gpu-quota's admit route: the request decoded (400 when it is not one), answer's body
// written (503 with its error).
func admitHandler(answer func(context.Context, Request) (map[string]any, error)) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+AdmitPath, func(w http.ResponseWriter, r *http.Request) {
		var req Request
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			server.WriteError(w, http.StatusBadRequest, "bad request: %v", err)
			return
		}
		body, err := answer(r.Context(), req.counted())
		if err != nil {
			server.WriteError(w, http.StatusServiceUnavailable, "%v", err)
			return
		}
		server.WriteJSON(w, http.StatusOK, body)
	})
	return mux
}

// SynthHours are the GPU-hours of synthetic user i: a few in the last day and week, so budgets are looked at.
func SynthHours(user string) map[time.Duration]map[string]float64 {
	h := float64(len(user)+int(user[len(user)-1])) / 80
	return map[time.Duration]map[string]float64{
		24 * time.Hour:     {"mig A100-SXM4-40GB 1g.5gb": h},
		7 * 24 * time.Hour: {"mig A100-SXM4-40GB 1g.5gb": 3 * h, "gpu H100-80GB-HBM3": h},
	}
}

// UsageHandler serves the usage API's bulk GPU-hours endpoint (api/v1/gpu-hours) with SynthHours for every
// user: the same numbers the naive enforcer reads. It runs in the load generator's process, so each answer's
// windows (10,000 users each) are built and encoded once and kept: gpu-quota polls every 15 s, and building
// them anew took the load generator's core for tens of milliseconds inside measured runs, delaying a whole
// burst (64 of the 6,400 latencies of a run: its p99). Only asOf is fresh in every answer.
func UsageHandler(users int) http.Handler {
	var (
		mu      sync.Mutex
		encoded = map[string][]byte{} // the windows parameter -> its "windows" object
	)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		query := r.URL.Query().Get("windows")
		mu.Lock()
		body, ok := encoded[query]
		mu.Unlock()
		if !ok {
			windows := map[string]map[string]map[string]float64{}
			for _, name := range splitComma(query) {
				d, err := policy.ParseDuration(name)
				if err != nil {
					server.WriteError(w, http.StatusBadRequest, "window %q: %v", name, err)
					return
				}
				per := make(map[string]map[string]float64, users)
				for i := range users {
					u := benchkit.UserName(i)
					per[u] = SynthHours(u)[d]
				}
				windows[name] = per
			}
			var err error
			if body, err = json.Marshal(windows); err != nil {
				server.WriteError(w, http.StatusInternalServerError, "encode GPU-hours: %v", err)
				return
			}
			mu.Lock()
			encoded[query] = body
			mu.Unlock()
		}
		// Written as bytes: encoding the kept object again (a RawMessage is compacted) would scan it each time.
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		out := append([]byte(`{"asOf":"`), time.Now().UTC().Format(time.RFC3339Nano)...)
		out = append(append(append(out, `","windows":`...), body...), "}\n"...)
		_, _ = w.Write(out)
	})
}

func splitComma(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			if i > start {
				out = append(out, s[start:i])
			}
			start = i + 1
		}
	}
	return out
}
