package proc

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestStopKillsGroup: a process that ignores SIGTERM and has a child is killed with its child
// after the grace period; nothing of it survives Stop.
func TestStopKillsGroup(t *testing.T) {
	dir := t.TempDir()
	childFile := filepath.Join(dir, "child")
	p, err := Start(context.Background(), slog.New(slog.DiscardHandler), Spec{
		Name: "stubborn", Path: "/bin/sh",
		Args:    []string{"-c", `trap "" TERM; sleep 300 & echo $! > ` + childFile + `; wait`},
		LogFile: filepath.Join(dir, "log"),
		// Ready once the pid is written: the shell creates the file before echo writes to it.
		Ready: func(context.Context) error {
			data, err := os.ReadFile(childFile)
			if err == nil && !strings.HasSuffix(string(data), "\n") {
				err = errors.New("child pid not written yet")
			}
			return err
		},
		StopGrace: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(childFile)
	if err != nil {
		t.Fatal(err)
	}
	child, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	leader := p.Pid()
	start := time.Now()
	p.Stop()
	p.Stop() // idempotent
	if took := time.Since(start); took < 200*time.Millisecond || took > 5*time.Second {
		t.Errorf("Stop took %s, want the 200ms grace then a kill", took)
	}
	for _, pid := range []int{leader, child} {
		// The child is reparented and reaped by init; give it a moment.
		deadline := time.Now().Add(2 * time.Second)
		for syscall.Kill(pid, 0) == nil && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) && !isZombie(pid) {
			t.Errorf("pid %d survived Stop", pid)
		}
	}
}

func isZombie(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	s := string(data)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(fields) > 0 && fields[0] == "Z"
}

// TestStartNotReady: a process that exits before it is ready makes Start fail and say so.
func TestStartNotReady(t *testing.T) {
	_, err := Start(context.Background(), slog.New(slog.DiscardHandler), Spec{
		Name: "quitter", Path: "/bin/sh", Args: []string{"-c", "exit 3"},
		Ready: func(context.Context) error { return errors.New("not yet") },
	})
	if err == nil || !strings.Contains(err.Error(), "exited before ready") {
		t.Fatalf("Start err = %v, want exited before ready", err)
	}
}
