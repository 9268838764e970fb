//go:build e2e

package e2etest

import (
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuhub/gpuhub/e2e/internal/hubproc"
	"github.com/gpuhub/gpuhub/hubapi"
)

// TestListenersLoopbackOnly checks every TCP listener of the harness (control plane, Hub, proxy, a
// running single-user server and its kernel-less children) binds a 127.0.0.0/8 address, never a
// wildcard or another interface.
func TestListenersLoopbackOnly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := hubAdmin.StartServer(ctx, "bob", "net", map[string]any{"profile": "t4-shared"}); err != nil {
		t.Fatal(err)
	}
	defer hub().Stop(t, "bob", "net")
	waitServer(ctx, t, "bob", "net", func(s hubapi.Server) bool { return s.Ready })

	roots := map[int]string{}
	for name, pid := range st.ControlPlane.Pids() {
		roots[pid] = name
	}
	for _, pid := range hubproc.MarkedProcesses(st.Hub.Marker()) {
		roots[pid] = "hub/proxy"
	}
	for pod, pids := range st.Emulator.Processes() {
		for _, pid := range pids {
			roots[pid] = "pod " + pod
		}
	}
	pids := withDescendants(roots)
	listeners := listeningSockets(t)
	checked := 0
	for pid, name := range pids {
		for _, inode := range socketInodes(pid) {
			addr, ok := listeners[inode]
			if !ok {
				continue
			}
			checked++
			if ip := net.ParseIP(addr); ip == nil || !ip.IsLoopback() {
				t.Errorf("%s (pid %d) listens on %s, not on loopback", name, pid, addr)
			}
		}
	}
	// etcd (2), API server, scheduler, controller manager, Hub, proxy (2), single-user server.
	if checked < 9 {
		t.Errorf("found only %d listening sockets of the harness, want at least 9", checked)
	}
	t.Logf("%d listening sockets of %d processes, all on 127.0.0.0/8", checked, len(pids))
}

// withDescendants adds every descendant of the given processes (kernels, the proxy's workers).
func withDescendants(roots map[int]string) map[int]string {
	all := map[int]string{}
	for pid, name := range roots {
		all[pid] = name
	}
	parent := map[int]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so split after the last ')'.
		fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
		if len(fields) > 1 {
			if ppid, err := strconv.Atoi(fields[1]); err == nil {
				parent[pid] = ppid
			}
		}
	}
	for changed := true; changed; {
		changed = false
		for pid, ppid := range parent {
			if name, ok := all[ppid]; ok {
				if _, seen := all[pid]; !seen {
					all[pid] = name + " (child)"
					changed = true
				}
			}
		}
	}
	return all
}

// listeningSockets maps socket inode to local IP for every TCP socket in LISTEN state.
func listeningSockets(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(data), "\n")[1:] {
			fields := strings.Fields(line)
			if len(fields) < 10 || fields[3] != "0A" { // 0A = LISTEN
				continue
			}
			ipHex, _, _ := strings.Cut(fields[1], ":")
			out[fields[9]] = decodeProcIP(ipHex)
		}
	}
	return out
}

// decodeProcIP decodes /proc/net/tcp's address: 32-bit words in host (little-endian) order.
func decodeProcIP(h string) string {
	b, err := hex.DecodeString(h)
	if err != nil || len(b)%4 != 0 {
		return h
	}
	for i := 0; i < len(b); i += 4 {
		b[i], b[i+1], b[i+2], b[i+3] = b[i+3], b[i+2], b[i+1], b[i]
	}
	return net.IP(b).String()
}

func socketInodes(pid int) []string {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		link, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err == nil && strings.HasPrefix(link, "socket:[") {
			out = append(out, strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]"))
		}
	}
	return out
}
