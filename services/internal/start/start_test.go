package start

import (
	"syscall"
	"testing"
	"time"
)

// TestSignals: SIGHUP reaches reload (two in a row count as one when nobody has looked yet), SIGTERM ends ctx.
func TestSignals(t *testing.T) {
	ctx, reload, stop := Signals()
	defer stop()
	for range 2 {
		if err := syscall.Kill(syscall.Getpid(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-reload:
	case <-time.After(5 * time.Second):
		t.Fatal("SIGHUP did not reach reload")
	}
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("SIGTERM did not end the context")
	}
}
