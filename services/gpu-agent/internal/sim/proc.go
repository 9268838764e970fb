package sim

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"

	"github.com/gpuhub/gpuhub/services/gpu-agent/internal/attribution"
)

// Environment the node emulator sets on every process it starts for a pod
// (docs/architecture.md, "Contract: the node emulator and the simulated GPU
// backend"); children inherit it.
const (
	EnvNode   = "GPUHUB_SIM_NODE"
	EnvPodUID = "GPUHUB_SIM_POD_UID"
)

// userHZ is the unit of utime/stime in /proc/<pid>/stat. It is 100 on every
// Linux architecture the project targets (sysconf(_SC_CLK_TCK)).
const userHZ = 100

const pageSize = 4096

// proc is one process of an emulated pod.
type proc struct {
	pid      int
	podUID   string
	cpuTicks uint64 // utime + stime
	rssBytes uint64
}

// scan lists the processes of node's pods with their pod UID and CPU time:
// those whose environment names node (the node emulator's processes), and,
// on a real kubelet, those whose cgroup is a pod's for which held says true
// (a container's processes carry no emulator environment, and another user's
// environ may not be readable at all). Processes that vanish or cannot be
// read mid-scan are skipped.
func scan(procFS fs.FS, node string, held func(podUID string) bool) ([]proc, error) {
	entries, err := fs.ReadDir(procFS, ".")
	if err != nil {
		return nil, fmt.Errorf("list proc: %w", err)
	}
	var out []proc
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		uid := ""
		if env, err := fs.ReadFile(procFS, e.Name()+"/environ"); err == nil {
			if envNode, podUID := environ(env); envNode == node {
				uid = podUID
			}
		}
		if uid == "" && held != nil {
			if cg, err := fs.ReadFile(procFS, e.Name()+"/cgroup"); err == nil {
				if c, err := attribution.ParseCgroup(string(cg)); err == nil && held(c.PodUID) {
					uid = c.PodUID
				}
			}
		}
		if uid == "" {
			continue // not a pod's of this node, gone, or not ours to read
		}
		stat, err := fs.ReadFile(procFS, e.Name()+"/stat")
		if err != nil {
			continue
		}
		ticks, err := parseStat(string(stat))
		if err != nil {
			continue
		}
		p := proc{pid: pid, podUID: uid, cpuTicks: ticks}
		if statm, err := fs.ReadFile(procFS, e.Name()+"/statm"); err == nil {
			p.rssBytes = parseStatm(string(statm))
		}
		out = append(out, p)
	}
	return out, nil
}

func environ(b []byte) (node, podUID string) {
	for kv := range bytes.SplitSeq(b, []byte{0}) {
		k, v, ok := bytes.Cut(kv, []byte("="))
		if !ok {
			continue
		}
		switch string(k) {
		case EnvNode:
			node = string(v)
		case EnvPodUID:
			podUID = string(v)
		}
	}
	return node, podUID
}

// parseStat returns utime+stime (fields 14 and 15) of /proc/<pid>/stat. The
// command name (field 2) is in parentheses and may hold spaces or ')', so
// fields are counted after the last ')'.
func parseStat(s string) (uint64, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("stat: no command field")
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state): utime is field 14 -> f[11], stime f[12].
	if len(f) < 13 {
		return 0, errors.New("stat: too few fields")
	}
	utime, err := strconv.ParseUint(f[11], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stat utime: %w", err)
	}
	stime, err := strconv.ParseUint(f[12], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stat stime: %w", err)
	}
	return utime + stime, nil
}

// parseStatm returns the resident set size from /proc/<pid>/statm (pages).
func parseStatm(s string) uint64 {
	f := strings.Fields(s)
	if len(f) < 2 {
		return 0
	}
	v, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		return 0
	}
	return v * pageSize
}
