package app_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpuhub/gpuhub/hubapi/hubapitest"
	"github.com/gpuhub/gpuhub/hubapi/hubauth"
	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/admit"
	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/app"
	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/bench"
	"github.com/gpuhub/gpuhub/services/internal/benchkit"
	"github.com/gpuhub/gpuhub/services/internal/server"
)

const (
	benchPrefix    = "/services/gpu-quota/"
	benchAdmitPath = benchPrefix + "api/v1/admit"
	benchToken     = "quota-token"
	// benchSpawns is B2's "64 at once": z2jh's concurrentSpawnLimit.
	benchSpawns = 64
)

// admitRig is gpu-quota as main starts it (app.Run: informers, Hub directory, usage cache, decision log,
// engine, API with Hub-token auth, server with metrics and access log) on B2's synthetic cluster (10,000 users,
// 10,000 pods, 150 GPU nodes) in a fake clientset, with B2's policy and spawns, logging JSON at info as the
// chart configures it (to io.Discard: the formatting is the service's cost, the pipe is not).
type admitRig struct {
	addr    string
	handler http.Handler
	bodies  [][]byte
}

func startAdmitRig(b *testing.B) *admitRig {
	b.Helper()
	synth := benchkit.Synth{Users: 10_000, Pods: 10_000, GPUNodes: 150, GPUPodEvery: 4}
	var objs []runtime.Object
	for _, n := range append(synth.Nodes(), bench.RaceNode()) {
		objs = append(objs, n)
	}
	for _, p := range synth.PodObjects("jhub") {
		objs = append(objs, p)
	}
	// The directory of 10,000 users comes from bench.Directory (the fake Hub's listing is quadratic); the fake
	// Hub answers the token checks of hubauth.
	hub := hubapitest.New(b)
	hub.AddToken(benchToken, "gpu-quota", "list:users", "read:users:name", "read:users:groups")
	usage := httptest.NewServer(bench.UsageHandler(synth.Users))
	b.Cleanup(usage.Close)
	policyPath := filepath.Join(b.TempDir(), "policy.yaml")
	if err := os.WriteFile(policyPath, []byte(bench.PolicyYAML(7)), 0o600); err != nil {
		b.Fatal(err)
	}
	ln, err := (&net.ListenConfig{}).Listen(b.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	logger := slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan *server.Server, 1)
	done := make(chan error, 1)
	go func() {
		done <- app.Run(ctx, app.Options{
			Logger: logger, Registry: reg, Listener: ln, Prefix: benchPrefix, PolicyPath: policyPath,
			Kube: fake.NewClientset(objs...), Namespace: "jhub", Hub: bench.Directory(synth.Users), Token: benchToken,
			Auth:           hubauth.New(hubauth.Options{Hub: hub.Client(benchToken), Logger: logger, Registerer: reg}).Middleware,
			ReaderServices: []string{"gpu-usage", "gpu-profiles"}, UsageURL: usage.URL + "/services/gpu-usage/",
			OnServing: func(s *server.Server, _ *admit.Engine) { served <- s },
		})
	}()
	b.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			b.Errorf("Run: %v", err)
		}
	})
	var srv *server.Server
	select {
	case srv = <-served:
	case err := <-done:
		b.Fatalf("Run: %v", err)
	}
	if err := benchkit.WaitReady(b.Context(), "http://"+srv.Addr().String()+"/readyz"); err != nil {
		b.Fatal(err)
	}
	rig := &admitRig{addr: srv.Addr().String(), handler: srv.Handler()}
	for _, r := range bench.Requests(synth.Users, 4096, 3) {
		rig.bodies = append(rig.bodies, r.Wire())
	}
	// Admitted spawns keep their GPUs reserved (5 min): fill the free units first, so that every run measures
	// the steady state of B2's runs rather than a cluster emptying under the benchmark. In it about half the
	// spawns are a server admitted in the warm-up starting again on its own reservation (ok), the rest refused
	// (none_free with the classes one can take, kind_not_allowed): 2,592 / 1,378 / 1,030 of 5,000.
	for i := range 4 * len(rig.bodies) {
		if code := rig.serve(b, i); code != http.StatusOK {
			b.Fatalf("warm-up admission: status %d", code)
		}
	}
	return rig
}

// serve sends spawn i through the handler, as the server would without the connection.
func (r *admitRig) serve(b *testing.B, i int) int {
	req := httptest.NewRequestWithContext(b.Context(), http.MethodPost, benchAdmitPath, bytes.NewReader(r.bodies[i%len(r.bodies)]))
	req.Header.Set("Authorization", "token "+benchToken)
	req.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	r.handler.ServeHTTP(w, req)
	return w.Code
}

// BenchmarkAdmitHTTP is one admission through gpu-quota's whole HTTP stack, B2's workload. "handler" calls
// the server's handler in-process (httptest's request and recorder included). "loopback-64" keeps 64 spawns
// in flight over 64 keep-alive loopback connections, as the Hub's 64 concurrent spawns arrive; the client
// writes prepared requests and reads the answers with a minimal parser, so that almost all of the CPU is the
// server's. cpu-ns/op is the process's user+system CPU per admission (client, server and loopback), the
// number that queues 64 requests on one core; with -cpu 1 it is ns/op too. "floor/..." are the same for
// B2's floor (bench.Floor: the same server package reading the request and answering without a decision), so
// that what gpu-quota adds shows in one run:
//
//	go test -run '^$' -bench BenchmarkAdmitHTTP -cpu 1 -benchtime 20000x ./services/gpu-quota/internal/app/
func BenchmarkAdmitHTTP(b *testing.B) {
	rig := startAdmitRig(b)
	floor := startFloorRig(b, rig.bodies)
	for _, r := range []struct {
		name string
		rig  *admitRig
	}{{"", rig}, {"floor/", floor}} {
		b.Run(r.name+"handler", func(b *testing.B) { benchHandler(b, r.rig) })
		b.Run(r.name+"loopback-64", func(b *testing.B) { benchLoopback(b, r.rig) })
	}
}

// startFloorRig serves bench.Floor as the benchmark's SUT process does, on a loopback port, with rig's bodies.
func startFloorRig(b *testing.B, bodies [][]byte) *admitRig {
	b.Helper()
	ln, err := (&net.ListenConfig{}).Listen(b.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	logger := slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))
	srv, err := server.New(server.Options{Listener: ln, Prefix: benchPrefix, Registry: prometheus.NewRegistry(),
		Logger: logger, Subsystem: "floor", Handler: bench.Floor()})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	b.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			b.Errorf("floor: %v", err)
		}
	})
	if err := benchkit.WaitReady(b.Context(), "http://"+ln.Addr().String()+"/readyz"); err != nil {
		b.Fatal(err)
	}
	return &admitRig{addr: ln.Addr().String(), handler: srv.Handler(), bodies: bodies}
}

func benchHandler(b *testing.B, rig *admitRig) {
	b.ReportAllocs()
	cpu := startCPU()
	for i := 0; b.Loop(); i++ {
		if code := rig.serve(b, i); code != http.StatusOK {
			b.Fatalf("status %d", code)
		}
	}
	cpu.report(b)
}

func benchLoopback(b *testing.B, rig *admitRig) {
	conns := make([]*benchkit.RawConn, benchSpawns)
	for i := range conns {
		c, err := benchkit.DialRaw(b.Context(), rig.addr)
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = c.Close() }()
		conns[i] = c
	}
	reqs := make([][]byte, len(rig.bodies))
	for i, body := range rig.bodies {
		reqs[i] = benchkit.RawRequest(http.MethodPost, rig.addr, benchAdmitPath,
			[][2]string{{"User-Agent", "gpuhub-bench"}, {"Authorization", "token " + benchToken}, {"Content-Type", "application/json"}}, body)
	}
	var next atomic.Int64
	var failed atomic.Pointer[error]
	b.ReportAllocs()
	b.ResetTimer()
	cpu := startCPU()
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= b.N {
					return
				}
				status, body, err := c.RoundTrip(reqs[i%len(reqs)])
				if err == nil && status != http.StatusOK {
					err = fmt.Errorf("admit answered %d: %s", status, bytes.TrimSpace(body))
				}
				if err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
	cpu.report(b)
}

// cpuClock is the process's CPU time (user + system) at the start of a measurement.
type cpuClock struct{ start time.Duration }

func startCPU() cpuClock { return cpuClock{start: processCPU()} }

func (c cpuClock) report(b *testing.B) {
	b.ReportMetric(float64((processCPU()-c.start).Nanoseconds())/float64(b.N), "cpu-ns/op")
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
