package policy

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestNewReloaderRefusesABadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, path, "replica: 1\n")
	r, err := NewReloader[testConfig](path, time.Unix(0, 0))
	var es Errors
	if r != nil || !errors.As(err, &es) || es[0].Line != 1 {
		t.Fatalf("NewReloader = %v, %v; want no reloader and a positioned error", r, err)
	}
	if _, err := NewReloader[testConfig](filepath.Join(t.TempDir(), "none.yaml"), time.Unix(0, 0)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
}

// TestReloader walks a policy file through the life of a ConfigMap: good, broken, put back, changed, gone.
func TestReloader(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	writeFile(t, path, "name: one\n")
	r, err := NewReloader[testConfig](path, t0)
	if err != nil {
		t.Fatal(err)
	}
	type want struct {
		name    string
		changed bool
		err     string
		status  Status
	}
	steps := []struct {
		what  string
		write string // file content; "" removes the file
		want  want
	}{
		{what: "unchanged", write: "name: one\n", want: want{name: "one", status: Status{
			OK: true, LastSuccess: at(1), Loaded: t0, LastAttempt: at(1)}}},
		{what: "broken: the last good policy stays", write: "name: two\nreplica: 3\n", want: want{name: "one",
			err:    path + `:2:1: unknown key "replica" (did you mean "replicas"?)`,
			status: Status{OK: false, LastSuccess: at(1), Loaded: t0, LastAttempt: at(2), Failures: 1}}},
		{what: "still broken", write: "name: two\nreplicas: -1\n", want: want{name: "one",
			err:    path + `:2:11: replicas: cannot be negative`,
			status: Status{OK: false, LastSuccess: at(1), Loaded: t0, LastAttempt: at(3), Failures: 2}}},
		{what: "put back as it was", write: "name: one\n", want: want{name: "one", status: Status{
			OK: true, LastSuccess: at(4), Loaded: t0, LastAttempt: at(4), Failures: 2}}},
		{what: "changed", write: "name: three\n", want: want{name: "three", changed: true, status: Status{
			OK: true, LastSuccess: at(5), Loaded: at(5), LastAttempt: at(5), Reloads: 1, Failures: 2}}},
		{what: "removed", want: want{name: "three",
			err:    "read policy: open " + path + ": no such file or directory",
			status: Status{OK: false, LastSuccess: at(5), Loaded: at(5), LastAttempt: at(6), Reloads: 1, Failures: 3}}},
	}
	for i, s := range steps {
		if s.write == "" {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		} else {
			writeFile(t, path, s.write)
		}
		changed, err := r.Reload(at(i + 1))
		got := want{name: r.Current().Name, changed: changed, status: r.Status()}
		if err != nil {
			got.err = err.Error()
			if st := r.Status(); st.Err == nil || st.Err.Error() != err.Error() {
				t.Errorf("%s: Status().Err = %v, want the error Reload returned", s.what, st.Err)
			}
		}
		s.want.status.Path = path
		if diff := cmp.Diff(s.want, got, cmp.AllowUnexported(want{}), cmpopts.IgnoreFields(Status{}, "Err")); diff != "" {
			t.Errorf("%s (-want +got):\n%s", s.what, diff)
		}
	}
}

// TestReloaderConcurrent: decisions read Current while reloads (SIGHUP and a file watch at once) replace it;
// run with -race. Every policy read is whole: one of the files written, never a mix.
func TestReloaderConcurrent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, path, "name: a\nreplicas: 1\n")
	r, err := NewReloader[testConfig](path, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				c := r.Current()
				if (c.Name == "a") != (c.Replicas == 1) {
					t.Errorf("a torn policy: %+v", c)
					return
				}
				_ = r.Status()
			}
		})
	}
	var reloaders sync.WaitGroup
	for g := range 2 {
		reloaders.Go(func() {
			for i := range 50 {
				_, _ = r.Reload(time.Unix(int64(g*100+i), 0))
			}
		})
	}
	for i := range 50 {
		// Write through a rename, as a ConfigMap update swaps its files, so a reader never sees half a file.
		tmp := path + ".tmp"
		content := "name: a\nreplicas: 1\n"
		if i%2 == 1 {
			content = "name: b\nreplicas: 2\n"
		}
		writeFile(t, tmp, content)
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	reloaders.Wait()
	close(stop)
	wg.Wait()
}
