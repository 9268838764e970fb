package policy

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Reloader holds the policy a service acts on and replaces it when its file changes. A file that fails to
// load at start is the caller's error to refuse to start on (NewReloader); a file that fails to reload later
// (a ConfigMap update, SIGHUP) leaves the last good policy in use and is reported by Status, for the log, a
// metric and /readyz. Current is lock-free: decisions read it on every request.
type Reloader[T any] struct {
	path string

	mu   sync.Mutex // one reload at a time; guards good
	good []byte     // the file content Current was decoded from

	cur    atomic.Pointer[T]
	status atomic.Pointer[Status]
}

// Status is how the last reload went.
type Status struct {
	Path string
	// OK is true when the last attempt loaded the file, or found it unchanged; false when it failed and the
	// policy in use is an older one.
	OK bool
	// Err is why the last attempt failed (Errors for a file that does not decode; an I/O error), nil when OK.
	Err error
	// LastSuccess is when the file was last read and found good, changed or not: a metric's
	// last_success_timestamp. Loaded is when the policy in use was read.
	LastSuccess, Loaded time.Time
	// LastAttempt is when the file was last read, good or not.
	LastAttempt time.Time
	// Reloads counts the attempts that replaced the policy; Failures the attempts that failed, since start.
	Reloads, Failures uint64
}

// NewReloader loads the file at path into a new T; the service refuses to start on its error. now is when
// (no clock is read here).
func NewReloader[T any](path string, now time.Time) (*Reloader[T], error) {
	r := &Reloader[T]{path: path}
	data, v, err := r.read()
	if err != nil {
		return nil, err
	}
	r.good = data
	r.cur.Store(v)
	r.status.Store(&Status{Path: path, OK: true, LastSuccess: now, Loaded: now, LastAttempt: now})
	return r, nil
}

// Current is the policy in use: read it, never change it (reloads replace it as a whole).
func (r *Reloader[T]) Current() *T { return r.cur.Load() }

// Path is the file the Reloader reads.
func (r *Reloader[T]) Path() string { return r.path }

// goodHash is the hash of the content Current was decoded from.
func (r *Reloader[T]) goodHash() [sha256.Size]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return sha256.Sum256(r.good)
}

// Status is how the last reload went.
func (r *Reloader[T]) Status() Status { return *r.status.Load() }

// Reload reads the file again at now. changed is true when a new policy is now in use. On an error, the
// policy in use stays and Status reports the error until a later attempt succeeds (a file put back as it
// was counts as success).
func (r *Reloader[T]) Reload(now time.Time) (changed bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := *r.status.Load()
	st.LastAttempt = now
	data, v, err := r.read()
	switch {
	case err != nil:
		st.OK, st.Err = false, err
		st.Failures++
	case bytes.Equal(data, r.good):
		st.OK, st.Err, st.LastSuccess = true, nil, now
	default:
		r.good = data
		r.cur.Store(v)
		st.OK, st.Err, st.LastSuccess, st.Loaded = true, nil, now, now
		st.Reloads++
		changed = true
	}
	r.status.Store(&st)
	return changed, err
}

func (r *Reloader[T]) read() ([]byte, *T, error) {
	data, err := os.ReadFile(r.path)
	if err != nil {
		return nil, nil, fmt.Errorf("read policy: %w", err)
	}
	v := new(T)
	if err := Decode(r.path, data, v); err != nil {
		return nil, nil, err
	}
	return data, v, nil
}

// Check is `gpuhub policy check`: it loads the file at path into into (a pointer to a fresh policy value) and
// writes the result to out, one error a line (file:line:column: message) and a count, or "<path>: ok". It
// returns the error, so that the command exits non-zero.
func Check(out io.Writer, path string, into any) error { return CheckAs(out, path, "", into) }

// CheckAs is Check that says what the file was checked as (e.g. "gpu-culler policy") on its last line:
// "<path>: ok (gpu-culler policy)".
func CheckAs(out io.Writer, path, what string, into any) error {
	if what != "" {
		what = " (" + what + ")"
	}
	err := Load(path, into)
	if err == nil {
		_, werr := fmt.Fprintf(out, "%s: ok%s\n", path, what)
		return werr
	}
	var es Errors
	if !errors.As(err, &es) {
		_, _ = fmt.Fprintf(out, "%s: %v%s\n", path, err, what)
		return err
	}
	for _, e := range es {
		_, _ = fmt.Fprintln(out, e.Error())
	}
	switch {
	case len(es) > 0 && es[len(es)-1].Msg == tooManyErrors:
		_, _ = fmt.Fprintf(out, "%s: more than %d errors%s\n", path, maxErrors, what)
	case len(es) == 1:
		_, _ = fmt.Fprintf(out, "%s: 1 error%s\n", path, what)
	default:
		_, _ = fmt.Fprintf(out, "%s: %d errors%s\n", path, len(es), what)
	}
	return err
}

// Keys are the top-level keys of the policy type of into (a pointer to a policy value), as files write them:
// what tells one service's policy file from another's.
func Keys(into any) []string {
	fs, _ := fields(typeOf(into))
	keys := make([]string, len(fs))
	for i, f := range fs {
		keys[i] = f.name
	}
	return keys
}
