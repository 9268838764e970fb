package attribution

import (
	"fmt"
	"io/fs"
	"strconv"
)

// Resolver reads /proc (as an fs.FS rooted at the proc mount, so tests use
// fstest.MapFS and a containerised agent can read the host's /proc mounted
// elsewhere).
type Resolver struct {
	proc fs.FS
}

// NewResolver returns a Resolver over proc, e.g. os.DirFS("/proc").
func NewResolver(proc fs.FS) *Resolver {
	return &Resolver{proc: proc}
}

// Cgroup returns what /proc/<pid>/cgroup says about pid. PIDs are host PIDs
// (NVML reports them so): the agent needs the host's /proc.
func (r *Resolver) Cgroup(pid int) (Cgroup, error) {
	b, err := fs.ReadFile(r.proc, strconv.Itoa(pid)+"/cgroup")
	if err != nil {
		return Cgroup{}, fmt.Errorf("read cgroup of pid %d: %w", pid, err)
	}
	cg, err := ParseCgroup(string(b))
	if err != nil {
		return Cgroup{}, fmt.Errorf("pid %d: %w", pid, err)
	}
	return cg, nil
}
