// Package attribution maps a process to the Kubernetes pod it belongs to:
// PID -> /proc/<pid>/cgroup -> pod UID -> pod (node-local informer) -> user.
package attribution

import (
	"errors"
	"strings"
)

// Container runtimes recognised in cgroup paths.
const (
	RuntimeContainerd = "containerd"
	RuntimeCRIO       = "cri-o"
	RuntimeDocker     = "docker"
	RuntimeUnknown    = ""
)

// ErrNotInPod means the process's cgroup is not under a kubepods hierarchy
// (a host process, or one outside any pod).
var ErrNotInPod = errors.New("process is not in a pod cgroup")

// Cgroup is what a /proc/<pid>/cgroup file says about a process.
type Cgroup struct {
	PodUID      string
	ContainerID string // empty for a process in the pod-level cgroup
	Runtime     string
}

// ParseCgroup reads the content of /proc/<pid>/cgroup. It accepts cgroup v2
// ("0::/path") and v1 (one line per hierarchy), the systemd and cgroupfs
// drivers, and containerd, CRI-O and Docker scope names. Paths seen from
// another cgroup namespace start with "/.." and are handled the same way.
func ParseCgroup(content string) (Cgroup, error) {
	var best Cgroup
	found := false
	for line := range strings.SplitSeq(content, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		// hierarchy-ID:controller-list:path; the path may itself contain ':'.
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		cg, ok := parsePath(parts[2])
		if !ok {
			continue
		}
		// Prefer a line that also names the container; v1 files repeat the
		// same pod on every controller line.
		if !found || (best.ContainerID == "" && cg.ContainerID != "") {
			best, found = cg, true
		}
	}
	if !found {
		return Cgroup{}, ErrNotInPod
	}
	return best, nil
}

func parsePath(path string) (Cgroup, bool) {
	segs := strings.Split(path, "/")
	podIdx := -1
	var cg Cgroup
	for i, s := range segs {
		if uid, ok := podSegment(s, segs[:i]); ok {
			cg.PodUID, podIdx = uid, i
		}
	}
	if podIdx < 0 {
		return Cgroup{}, false
	}
	for _, s := range segs[podIdx+1:] {
		if id, rt, ok := containerSegment(s); ok {
			cg.ContainerID, cg.Runtime = id, rt
			break
		}
	}
	return cg, true
}

// podSegment recognises the pod level of the kubepods hierarchy:
// systemd driver "kubepods-burstable-pod<uid_with_underscores>.slice"
// (also "kubelet-kubepods-...", as kind nests it) and cgroupfs driver
// "pod<uid>" below a "kubepods" segment.
func podSegment(s string, parents []string) (string, bool) {
	if rest, ok := strings.CutSuffix(s, ".slice"); ok {
		i := strings.LastIndex(rest, "-pod")
		if i < 0 || !strings.Contains(rest[:i], "kubepods") {
			return "", false
		}
		return normalizeUID(strings.ReplaceAll(rest[i+len("-pod"):], "_", "-"))
	}
	rest, ok := strings.CutPrefix(s, "pod")
	if !ok || !underKubepods(parents) {
		return "", false
	}
	return normalizeUID(rest)
}

func underKubepods(parents []string) bool {
	for _, p := range parents {
		if p == "kubepods" || strings.HasPrefix(p, "kubepods") {
			return true
		}
	}
	return false
}

// normalizeUID accepts a UUID (API pods) or 32 hex digits (the config hash
// static pods use) and returns it lowercased.
func normalizeUID(s string) (string, bool) {
	s = strings.ToLower(s)
	switch len(s) {
	case 36:
		for i, c := range s {
			if i == 8 || i == 13 || i == 18 || i == 23 {
				if c != '-' {
					return "", false
				}
				continue
			}
			if !isHex(c) {
				return "", false
			}
		}
		return s, true
	case 32:
		for _, c := range s {
			if !isHex(c) {
				return "", false
			}
		}
		return s, true
	}
	return "", false
}

func isHex(c rune) bool {
	return ('0' <= c && c <= '9') || ('a' <= c && c <= 'f')
}

// containerSegment recognises a container's cgroup below the pod:
// "cri-containerd-<id>.scope", "crio-<id>.scope", "docker-<id>.scope"
// (systemd driver) or a bare 64-hex "<id>" (cgroupfs driver).
func containerSegment(s string) (id, runtime string, ok bool) {
	if rest, found := strings.CutSuffix(s, ".scope"); found {
		for _, p := range []struct{ prefix, runtime string }{
			{"cri-containerd-", RuntimeContainerd},
			{"crio-", RuntimeCRIO},
			{"docker-", RuntimeDocker},
		} {
			if id, found := strings.CutPrefix(rest, p.prefix); found && isContainerID(id) {
				return id, p.runtime, true
			}
		}
		return "", "", false
	}
	if isContainerID(s) {
		return s, RuntimeUnknown, true
	}
	return "", "", false
}

func isContainerID(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if !isHex(c) {
			return false
		}
	}
	return true
}
