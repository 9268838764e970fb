package benchkit

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// Ready is the line a system-under-test process prints on stdout once it serves.
const Ready = "ready"

// Start starts one system under test (args[0] with args[1:], env added to this process's) and waits for its
// "ready" line; stop interrupts it and waits for it to exit. Its stderr is this process's.
func Start(ctx context.Context, args, env []string) (stop func(), err error) {
	p, err := StartProc(ctx, args, env)
	if err != nil {
		return nil, err
	}
	return p.Stop, nil
}

// Proc is a system under test started by StartProc.
type Proc struct {
	cmd  *exec.Cmd
	stop func()
}

// Stop interrupts the process and waits for it to exit.
func (p *Proc) Stop() { p.stop() }

// CPU is the CPU time (user and system) the process has used so far, from /proc/<pid>/stat; 0 where that
// cannot be read. Its difference over a run, divided by the run's calls, is the server's CPU per call: on
// the core it is pinned to, what a burst of calls queues behind.
func (p *Proc) CPU() time.Duration { return ProcessCPU(p.cmd.Process.Pid) }

// ProcessCPU is process pid's CPU time (user and system) so far; 0 where /proc/<pid>/stat cannot be read.
func ProcessCPU(pid int) time.Duration {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	return statCPU(raw)
}

// statCPU is the CPU time (utime + stime) of a /proc/<pid>/stat line; 0 where it cannot be read.
func statCPU(raw []byte) time.Duration {
	// The command name, in parentheses, may hold spaces and parentheses: the fields counted here come after
	// the last ")".
	i := strings.LastIndexByte(string(raw), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(raw[i+1:])) // f[0] is field 3 (state): utime and stime are fields 14 and 15
	if len(f) < 13 {
		return 0
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	return time.Duration(utime+stime) * time.Second / clockTicks
}

// clockTicks is USER_HZ, the unit of /proc's CPU times: 100 on every Linux architecture Go supports.
const clockTicks = 100

// StartProc is Start, keeping the process for its CPU time.
func StartProc(ctx context.Context, args, env []string) (*Proc, error) {
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	stop := func() { _ = cmd.Process.Signal(os.Interrupt); _ = cmd.Wait() }
	sc := bufio.NewScanner(out)
	if !sc.Scan() || sc.Text() != Ready {
		stop()
		return nil, fmt.Errorf("the SUT process %v did not become ready (%q)", args, sc.Text())
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	return &Proc{cmd: cmd, stop: stop}, nil
}

// StartServer starts a service's own binary (args, env added to this process's) and waits until readyURL
// answers 200 (its /readyz: informers synced); stop interrupts it and waits for it to exit. Its stdout and
// stderr go to log (nil: discarded).
func StartServer(ctx context.Context, args, env []string, readyURL string, log io.Writer) (stop func(), err error) {
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	// The exit status of a process told to stop says nothing the benchmark needs.
	stop = func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case err := <-exited:
			_ = err
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			err := <-exited
			_ = err
		}
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case err := <-exited:
			exited <- err // for stop
			cancel()
		case <-wctx.Done():
		}
	}()
	if err := WaitReady(wctx, readyURL); err != nil {
		stop()
		return nil, fmt.Errorf("%s did not become ready: %w", args[0], err)
	}
	return stop, nil
}

// Pinned prefixes args with taskset so the process runs on cpus only ("" leaves it unpinned).
func Pinned(cpus string, args []string) []string {
	if cpus == "" {
		return args
	}
	return append([]string{"taskset", "-c", cpus}, args...)
}

// WaitReady polls url until it answers 200, for up to 3 minutes.
func WaitReady(ctx context.Context, url string) error {
	deadline := time.Now().Add(3 * time.Minute)
	last := ""
	for time.Now().Before(deadline) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = string(b)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s not ready after 3 minutes: %s", url, last)
}
