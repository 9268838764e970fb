package admit_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/admit"
	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/api"
	"github.com/gpuhub/gpuhub/services/internal/decision"
	"github.com/gpuhub/gpuhub/services/internal/server"
)

const benchToken = "bench-admission-token"

// httpRig is gpu-quota's whole HTTP stack as app.Run builds it (server with access log and metrics, API,
// decision log, engine), logging as in production (JSON at info) to io.Discard.
func httpRig(b *testing.B) (http.Handler, [][]byte) {
	b.Helper()
	logger := slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))
	reg := prometheus.NewRegistry()
	log, err := decision.NewLog(decision.Options{Service: admit.Service, Logger: logger, Registerer: reg})
	if err != nil {
		b.Fatal(err)
	}
	eng, reqs := admit.BenchRig(b, 10_000, log)
	h, err := api.New(api.Options{Prefix: "/services/gpu-quota/", Engine: eng, Log: log, Token: benchToken,
		Auth: func(h http.Handler) http.Handler { return h }, Logger: logger})
	if err != nil {
		b.Fatal(err)
	}
	srv, err := server.New(server.Options{Prefix: "/services/gpu-quota/", Handler: h, Registry: reg, Logger: logger, Subsystem: "quota"})
	if err != nil {
		b.Fatal(err)
	}
	bodies := make([][]byte, len(reqs))
	for i, r := range reqs {
		if bodies[i], err = json.Marshal(r); err != nil {
			b.Fatal(err)
		}
	}
	return srv.Handler(), bodies
}

const admitPath = "/services/gpu-quota/api/v1/admit"

// BenchmarkAdmitHTTP is one admission through gpu-quota's HTTP handler: "handler" calls it in-process (the
// server's own CPU per request without the connection), "tcp" over keep-alive loopback connections (client
// included in the profile).
func BenchmarkAdmitHTTP(b *testing.B) {
	h, bodies := httpRig(b)
	b.Run("handler", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			req := httptest.NewRequestWithContext(b.Context(), http.MethodPost, admitPath, bytes.NewReader(bodies[i%len(bodies)]))
			req.Header.Set("Authorization", "token "+benchToken)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			if w.Code != http.StatusOK {
				b.Fatalf("status %d: %s", w.Code, w.Body)
			}
		}
	})
	b.Run("tcp", func(b *testing.B) {
		ts := httptest.NewServer(h)
		defer ts.Close()
		client := ts.Client()
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			req, _ := http.NewRequestWithContext(b.Context(), http.MethodPost, ts.URL+admitPath, bytes.NewReader(bodies[i%len(bodies)]))
			req.Header.Set("Authorization", "token "+benchToken)
			resp, err := client.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Fatalf("status %d", resp.StatusCode)
			}
		}
	})
}
