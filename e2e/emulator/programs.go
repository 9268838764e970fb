package emulator

import (
	"fmt"
	"net"
	"path"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Kind says how the emulator runs an allowed program.
type Kind int

const (
	// Singleuser is jupyterhub-singleuser: bound to the pod IP with --ip/--port, per-user HOME.
	Singleuser Kind = iota
	// Service is one of gpuhub's own programs (gpu-agent): its --listen host is replaced by the pod
	// IP and it gets a kubeconfig for the pod's ServiceAccount (KUBECONFIG).
	Service
)

// Program is an allow-list entry: containers whose command (or image) names Name, or one of
// Aliases, run Path. Nothing else from a pod spec is ever executed.
type Program struct {
	Name    string
	Aliases []string
	Path    string
	Kind    Kind
	// Args are added to every invocation (e.g. --allow-root for jupyter-server run as root).
	Args []string
	// Port is the port the program serves on when the container declares none (8888, 9400).
	Port int32
}

// invocation is what the emulator runs for one container.
type invocation struct {
	program Program
	args    []string
}

// resolve maps a container to an allow-listed program. The program name comes from command[0],
// else from args[0] when it is not a flag, else from the image's repository name.
func resolve(c corev1.Container, programs []Program) (invocation, error) {
	var name string
	var rest []string
	switch {
	case len(c.Command) > 0:
		name, rest = path.Base(c.Command[0]), append(append([]string{}, c.Command[1:]...), c.Args...)
	case len(c.Args) > 0 && !strings.HasPrefix(c.Args[0], "-"):
		name, rest = path.Base(c.Args[0]), c.Args[1:]
	default:
		name, rest = imageName(c.Image), c.Args
	}
	for _, p := range programs {
		if name != p.Name && !contains(p.Aliases, name) {
			continue
		}
		if p.Path == "" {
			return invocation{}, fmt.Errorf("program %q is allow-listed but not available on this machine", name)
		}
		return invocation{program: p, args: append(flagsOnly(rest), p.Args...)}, nil
	}
	allowed := make([]string, 0, len(programs))
	for _, p := range programs {
		allowed = append(allowed, p.Name)
	}
	return invocation{}, fmt.Errorf("container %q runs %q, which is not on the node emulator's allow-list %v",
		c.Name, name, allowed)
}

// flagsOnly keeps option arguments (--x=y, --flag, -x) and drops positional ones, so a pod spec can
// tune an allowed program but never name another program or script to run.
func flagsOnly(args []string) []string {
	var out []string
	for _, a := range args {
		if strings.HasPrefix(a, "-") {
			out = append(out, a)
		}
	}
	return out
}

// imageName returns the last path element of an image reference without tag or digest.
func imageName(image string) string {
	if i := strings.Index(image, "@"); i >= 0 {
		image = image[:i]
	}
	base := path.Base(image)
	if i := strings.Index(base, ":"); i >= 0 {
		base = base[:i]
	}
	return base
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// bindArgs makes the program listen on the pod IP only.
func bindArgs(inv invocation, podIP string, port int32) []string {
	args := append([]string{}, inv.args...)
	switch inv.program.Kind {
	case Singleuser:
		// Drop any --ip/--port from the pod spec: the process must bind its loopback pod IP.
		kept := args[:0]
		for _, a := range args {
			if strings.HasPrefix(a, "--ip") || strings.HasPrefix(a, "--port") ||
				strings.HasPrefix(a, "--ServerApp.ip") || strings.HasPrefix(a, "--ServerApp.port") {
				continue
			}
			kept = append(kept, a)
		}
		return append(kept, "--ip="+podIP, fmt.Sprintf("--port=%d", port))
	case Service:
		for i, a := range args {
			if v, ok := strings.CutPrefix(a, "--listen="); ok {
				_, p, err := net.SplitHostPort(v)
				if err != nil {
					p = fmt.Sprint(port)
				}
				args[i] = "--listen=" + net.JoinHostPort(podIP, p)
				return args
			}
		}
		// Always bind the pod IP: a program's own default (":9400") would listen on every interface.
		args = append(args, "--listen="+net.JoinHostPort(podIP, fmt.Sprint(port)))
	}
	return args
}

// deniedEnv are variables a pod spec may not set for a local process: they would let a pod load
// arbitrary code into an allowed program or escape its HOME.
var deniedEnv = map[string]bool{
	"PATH": true, "HOME": true, "PYTHONPATH": true, "PYTHONHOME": true, "PYTHONSTARTUP": true,
	"PYTHONUSERBASE": true, "NODE_OPTIONS": true, "BASH_ENV": true, "ENV": true,
}

func envAllowed(name string) bool {
	return !deniedEnv[name] && !strings.HasPrefix(name, "LD_") && !strings.HasPrefix(name, "GPUHUB_SIM_")
}
