package hubproc

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// MarkedProcesses returns the PIDs of live processes whose environment holds MarkerEnv=marker.
// It reads /proc, so it finds processes in any session or process group.
func MarkedProcesses(marker string) []int {
	want := []byte(MarkerEnv + "=" + marker)
	paths, _ := filepath.Glob("/proc/[0-9]*/environ")
	var pids []int
	for _, p := range paths {
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile(p)
		if err != nil {
			continue // exited meanwhile, or not ours to read
		}
		for _, kv := range bytes.Split(env, []byte{0}) {
			if bytes.Equal(kv, want) {
				if !isZombie(pid) {
					pids = append(pids, pid)
				}
				break
			}
		}
	}
	return pids
}

// killMarked ends the marked processes: SIGTERM, then SIGKILL for those still alive after grace.
// It returns the PIDs that survived SIGKILL too.
func killMarked(marker string, grace time.Duration) []int {
	pids := MarkedProcesses(marker)
	if len(pids) == 0 {
		return nil
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) && len(MarkedProcesses(marker)) > 0 {
		time.Sleep(100 * time.Millisecond)
	}
	for _, pid := range MarkedProcesses(marker) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	time.Sleep(100 * time.Millisecond)
	return MarkedProcesses(marker)
}

// isZombie reports a process that has exited but not been reaped: its environ can still be read
// on some kernels, yet it holds no port and needs no signal.
func isZombie(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	// Format: pid (comm) state ...; comm may contain spaces and parentheses.
	i := bytes.LastIndexByte(stat, ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] == 'Z'
}
