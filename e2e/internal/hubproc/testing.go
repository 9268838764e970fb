package hubproc

import (
	"context"
	"testing"
)

// StartT starts a Hub for one test and stops it in t.Cleanup; when the test failed, the tail of the
// Hub's log is written to the test output first.
func StartT(t testing.TB, opts Options) *Hub {
	t.Helper()
	h, err := Start(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("jupyterhub %s log (%s), tail:\n%s", h.Version(), h.LogPath(), h.LogTail(80))
		}
		if err := h.Stop(); err != nil {
			t.Errorf("stop jupyterhub: %v", err)
		}
	})
	return h
}
