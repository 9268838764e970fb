// Package proc supervises the local processes of the e2e harness: each runs in its own process
// group, dies with its parent (PR_SET_PDEATHSIG), logs to a file, and is stopped with SIGTERM,
// a grace period, then SIGKILL to the whole group, so a stopped harness leaves no stray process.
package proc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// Spec describes one process.
type Spec struct {
	Name    string
	Path    string
	Args    []string
	Env     []string // full environment; nil means the parent's environment
	Dir     string
	LogFile string // stdout and stderr; empty means discard
	// Ready reports nil once the process serves; Start polls it until it does.
	Ready func(ctx context.Context) error
	// ReadyTimeout bounds the wait for Ready (default 60 s).
	ReadyTimeout time.Duration
	// StopGrace is the time between SIGTERM and SIGKILL (default 10 s).
	StopGrace time.Duration
}

// Process is a started process.
type Process struct {
	spec   Spec
	cmd    *exec.Cmd
	done   chan struct{}
	err    error
	logger *slog.Logger
	once   sync.Once
	log    io.Closer
}

// Start starts the process and waits until spec.Ready (if set) succeeds, the process exits, or
// ctx ends. On any failure the process is stopped before Start returns.
func Start(ctx context.Context, logger *slog.Logger, spec Spec) (*Process, error) {
	if spec.StopGrace == 0 {
		spec.StopGrace = 10 * time.Second
	}
	if spec.ReadyTimeout == 0 {
		spec.ReadyTimeout = 60 * time.Second
	}
	cmd := exec.Command(spec.Path, spec.Args...) //nolint:noctx // lifetime is managed by Stop, not by a context
	cmd.Env = spec.Env
	cmd.Dir = spec.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	p := &Process{spec: spec, cmd: cmd, done: make(chan struct{}), logger: logger.With("process", spec.Name)}
	if spec.LogFile != "" {
		if err := os.MkdirAll(filepath.Dir(spec.LogFile), 0o755); err != nil {
			return nil, fmt.Errorf("log dir for %s: %w", spec.Name, err)
		}
		f, err := os.OpenFile(spec.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, fmt.Errorf("log file for %s: %w", spec.Name, err)
		}
		cmd.Stdout, cmd.Stderr, p.log = f, f, f
	}
	if err := cmd.Start(); err != nil {
		if p.log != nil {
			_ = p.log.Close()
		}
		return nil, fmt.Errorf("start %s: %w", spec.Name, err)
	}
	go func() {
		p.err = cmd.Wait()
		if p.log != nil {
			_ = p.log.Close()
		}
		close(p.done)
	}()
	p.logger.Debug("started", "pid", cmd.Process.Pid, "log", spec.LogFile)
	if spec.Ready == nil {
		return p, nil
	}
	if err := p.waitReady(ctx); err != nil {
		p.Stop()
		return nil, err
	}
	return p, nil
}

func (p *Process) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, p.spec.ReadyTimeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		last = p.spec.Ready(rctx)
		rcancel()
		if last == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited before ready (%w); see %s", p.spec.Name, p.err, p.spec.LogFile)
		case <-ctx.Done():
			return fmt.Errorf("%s not ready after %s: %w (last check: %w); see %s",
				p.spec.Name, p.spec.ReadyTimeout, ctx.Err(), last, p.spec.LogFile)
		case <-tick.C:
		}
	}
}

// Pid returns the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Name returns the spec's name.
func (p *Process) Name() string { return p.spec.Name }

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err returns the exit error once Done is closed.
func (p *Process) Err() error {
	<-p.done
	return p.err
}

// Stop sends SIGTERM to the process group, waits up to the grace period, then SIGKILLs the group.
// It returns once the process has been reaped; it is safe to call more than once.
func (p *Process) Stop() {
	p.StopWithGrace(p.spec.StopGrace)
}

// StopWithGrace is Stop with an explicit grace period.
func (p *Process) StopWithGrace(grace time.Duration) {
	p.once.Do(func() {
		pgid := p.cmd.Process.Pid
		select {
		case <-p.done:
		default:
			_ = syscall.Kill(-pgid, syscall.SIGTERM)
			select {
			case <-p.done:
			case <-time.After(grace):
				p.logger.Info("did not stop within its grace period, killing", "grace", grace)
			}
		}
		// Children that outlived the leader (or ignored SIGTERM) go too.
		if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			p.logger.Warn("kill process group", "err", err)
		}
		<-p.done
		p.logger.Debug("stopped", "exit", p.err)
	})
}
