//go:build integration

package bench

import (
	"context"
	"net"
	"net/http"
	"os"
	"testing"
	"time"
)

// TestHubFixture: the Hub starts with the fixture spawner, runs servers without processes, and lists them ready.
// GPUHUB_HUB_VENV names the venv (make venv-hub55).
func TestHubFixture(t *testing.T) {
	venv := os.Getenv("GPUHUB_HUB_VENV")
	if venv == "" {
		t.Fatal("GPUHUB_HUB_VENV is not set: run make venv-hub55 and set it to the venv")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stub := &http.Server{Handler: Stub(), ReadHeaderTimeout: time.Second}
	go func() { _ = stub.Serve(ln) }()
	defer func() { _ = stub.Close() }()
	h, err := StartHub(ctx, HubOptions{Venv: venv, StubURL: "http://" + ln.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Stop()
	if err := h.CreateUsers(ctx, 300); err != nil {
		t.Fatal(err)
	}
	users := []string{UserName(0), UserName(7), UserName(299)}
	if err := h.StartServers(ctx, users, 2, nil); err != nil {
		t.Fatalf("%v\n%s", err, h.LogTail())
	}
	if err := h.StartServers(ctx, users[:1], 1, nil); err != nil {
		t.Fatalf("starting a running server again: %v", err)
	}
	ready, err := h.ReadyUsers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ready) != 3 || !ready[UserName(299)] {
		t.Errorf("ready users %v, want the three started", ready)
	}
}
