package gpuhubstack

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// replicaServer answers every request with its name; down, its port refuses connections.
func replicaServer(t *testing.T, name string, down bool) int {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, name) }))
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	if down {
		srv.Close()
	} else {
		t.Cleanup(srv.Close)
	}
	return port
}

func TestFront(t *testing.T) {
	tests := map[string]struct {
		balanced bool
		down     []bool // per replica
		want     []string
	}{
		"first replica while it is up":      {down: []bool{false, false}, want: []string{"r0", "r0", "r0", "r0"}},
		"the next when the first is gone":   {down: []bool{true, false}, want: []string{"r1", "r1", "r1", "r1"}},
		"balanced: each in turn":            {balanced: true, down: []bool{false, false}, want: []string{"r1", "r0", "r1", "r0"}},
		"balanced: the live one, when gone": {balanced: true, down: []bool{false, true}, want: []string{"r0", "r0", "r0", "r0"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var ports []int
			for i, down := range tc.down {
				ports = append(ports, replicaServer(t, fmt.Sprintf("r%d", i), down))
			}
			f, err := newFront(context.Background(), ports, tc.balanced)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			var got []string
			for range tc.want {
				req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/x", f.Port), http.NoBody)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				got = append(got, string(b))
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("replicas that answered (-want +got):\n%s", diff)
			}
		})
	}
}
