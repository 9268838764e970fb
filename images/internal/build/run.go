package build

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gpuhub/gpuhub/images/internal/dockerfile"
)

// hostCABundle is this machine's certificate authorities (Debian's update-ca-certificates output), offered
// to RUN at buildCADir.
const (
	hostCABundle = "/etc/ssl/certs/ca-certificates.crt"
	buildCADir   = "/run/gpuhub-build-ca"
)

// dockerCaps is the capability set Docker gives a build's RUN (moby's oci/caps/defaults.go).
var dockerCaps = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW", "CAP_SETGID",
	"CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
}

// Mount is a bind mount of a runtime spec.
type Mount struct {
	Source, Destination string
	ReadOnly            bool
}

// Process is what a container runs.
type Process struct {
	Args     []string
	Env      []string
	Cwd      string
	UID, GID int
	Caps     []string
}

// RuntimeSpec is an OCI runtime configuration (runtime-spec 1.0) for root: new PID, IPC, UTS and mount
// namespaces, and a network namespace of its own (only loopback, nothing leaves) unless hostNetwork.
func RuntimeSpec(root string, readOnly, hostNetwork bool, p Process, binds []Mount) map[string]any {
	if p.Cwd == "" {
		p.Cwd = "/"
	}
	if p.Caps == nil {
		p.Caps = []string{}
	}
	mounts := []map[string]any{
		{"destination": "/proc", "type": "proc", "source": "proc"},
		{"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{"destination": "/dev/pts", "type": "devpts", "source": "devpts", "options": []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
		{"destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
	}
	for _, b := range binds {
		opts := []string{"rbind"}
		if b.ReadOnly {
			opts = append(opts, "ro")
		}
		mounts = append(mounts, map[string]any{"destination": b.Destination, "type": "bind", "source": b.Source, "options": opts})
	}
	namespaces := []map[string]any{{"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}}
	if !hostNetwork {
		namespaces = append(namespaces, map[string]any{"type": "network"})
	}
	return map[string]any{
		"ociVersion": "1.0.2",
		"process": map[string]any{
			"terminal":        false,
			"user":            map[string]any{"uid": p.UID, "gid": p.GID},
			"args":            p.Args,
			"env":             p.Env,
			"cwd":             p.Cwd,
			"capabilities":    map[string]any{"bounding": p.Caps, "effective": p.Caps, "permitted": p.Caps},
			"noNewPrivileges": true,
		},
		"root":     map[string]any{"path": root, "readonly": readOnly},
		"hostname": "gpuhub-build",
		"mounts":   mounts,
		"linux": map[string]any{
			"namespaces":    namespaces,
			"maskedPaths":   []string{"/proc/kcore", "/proc/keys", "/sys/firmware"},
			"readonlyPaths": []string{"/proc/sys", "/proc/sysrq-trigger"},
		},
	}
}

// RunContainer runs spec with runc in a fresh bundle directory and returns its combined output.
func RunContainer(ctx context.Context, runc, id string, spec map[string]any) ([]byte, error) {
	bundle, err := os.MkdirTemp("", "gpuhub-bundle-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(bundle)
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), data, 0o644); err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, runc, "--root", filepath.Join(bundle, "state"), "run", "--bundle", bundle, id)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("runc run: %w", err)
	}
	return out, nil
}

// UserIDs resolves USER as Docker does: NAME or UID, optionally :GROUP or :GID, from root's /etc/passwd and
// /etc/group; a user with no group given takes its passwd entry's group, or 0.
func UserIDs(root, user string) (int, int, error) {
	if user == "" {
		return 0, 0, nil
	}
	name, group, hasGroup := strings.Cut(user, ":")
	uid, gid := -1, 0
	if err := scanColon(filepath.Join(root, "etc", "passwd"), func(f []string) {
		if len(f) >= 4 && (f[0] == name || f[2] == name) && uid < 0 {
			uid, _ = strconv.Atoi(f[2])
			gid, _ = strconv.Atoi(f[3])
		}
	}); err != nil && !os.IsNotExist(err) {
		return 0, 0, err
	}
	if uid < 0 {
		n, err := strconv.Atoi(name)
		if err != nil {
			return 0, 0, fmt.Errorf("USER %s: no such user in /etc/passwd", user)
		}
		uid = n
	}
	if hasGroup {
		g := -1
		if err := scanColon(filepath.Join(root, "etc", "group"), func(f []string) {
			if len(f) >= 3 && (f[0] == group || f[2] == group) && g < 0 {
				g, _ = strconv.Atoi(f[2])
			}
		}); err != nil && !os.IsNotExist(err) {
			return 0, 0, err
		}
		if g < 0 {
			n, err := strconv.Atoi(group)
			if err != nil {
				return 0, 0, fmt.Errorf("USER %s: no such group in /etc/group", user)
			}
			g = n
		}
		gid = g
	}
	return uid, gid, nil
}

func scanColon(p string, fn func([]string)) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fn(strings.Split(sc.Text(), ":"))
	}
	return sc.Err()
}

// runInContainer runs a RUN instruction with /bin/sh -c in the stage's root filesystem, as the stage's
// user, with the host's network and name resolution (as `docker build` does) and RUN --mount caches.
func runInContainer(ctx context.Context, opts Options, st *stage, stages map[string]*stage, in dockerfile.Instruction) error {
	uid, gid, err := UserIDs(st.root, st.cfg.User)
	if err != nil {
		return err
	}
	env := setEnv(st.cfg.Env, in.Env)
	if !hasEnv(env, "PATH") {
		env = append(env, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	}
	binds := []Mount{}
	for _, f := range []string{"/etc/resolv.conf", "/etc/hosts"} {
		// The file must exist in the root filesystem to be mounted over; an empty one made here is taken out
		// again, so it does not end up in the image.
		dst := filepath.Join(st.root, f)
		if _, err := os.Lstat(dst); os.IsNotExist(err) {
			if err := os.WriteFile(dst, nil, 0o644); err != nil {
				return err
			}
			defer os.Remove(dst)
		}
		binds = append(binds, Mount{Source: f, Destination: f, ReadOnly: true})
	}
	mounts := []Mount{}
	// This machine's CA bundle is offered to RUN only (not kept in the image), like a BuildKit secret: where
	// the registries are reached through a TLS-inspecting proxy, pip and npm need its certificate authority.
	if _, err := os.Stat(hostCABundle); err == nil {
		mounts = append(mounts, Mount{Source: filepath.Dir(hostCABundle), Destination: buildCADir, ReadOnly: true})
		ca := buildCADir + "/" + filepath.Base(hostCABundle)
		env = setEnv(env, []string{"SSL_CERT_FILE=" + ca, "PIP_CERT=" + ca, "REQUESTS_CA_BUNDLE=" + ca, "NODE_EXTRA_CA_CERTS=" + ca, "CURL_CA_BUNDLE=" + ca})
	}
	for _, m := range in.Mounts {
		b, err := cacheMount(opts, stages, m)
		if err != nil {
			return err
		}
		mounts = append(mounts, b)
	}
	for _, b := range mounts {
		// The mount point is made for the RUN and taken out after it, as BuildKit does.
		dst := filepath.Join(st.root, filepath.FromSlash(b.Destination))
		if _, err := os.Lstat(dst); os.IsNotExist(err) {
			if err := os.MkdirAll(dst, 0o755); err != nil {
				return err
			}
			defer os.Remove(dst)
		}
		binds = append(binds, b)
	}
	caps := dockerCaps
	if uid != 0 {
		caps = nil
	}
	spec := RuntimeSpec(st.root, false, true, Process{Args: []string{"/bin/sh", "-c", in.Args[0]}, Env: env, Cwd: st.cfg.WorkingDir, UID: uid, GID: gid, Caps: caps}, binds)
	opts.Logger.Info("RUN", "line", in.Line, "command", firstLine(in.Args[0]))
	out, err := RunContainer(ctx, opts.Runc, fmt.Sprintf("gpuhub-build-%d-%d", os.Getpid(), in.Line), spec)
	if err != nil {
		return fmt.Errorf("%w\n%s", err, tail(out, 40))
	}
	return nil
}

// cacheMount turns RUN --mount=type=cache,target=X[,from=STAGE,source=Y][,id=I] into a bind mount: a
// stage's directory, or a directory kept in the cache between builds.
func cacheMount(opts Options, stages map[string]*stage, spec string) (Mount, error) {
	kv := map[string]string{}
	for _, part := range strings.Split(spec, ",") {
		k, v, _ := strings.Cut(part, "=")
		kv[k] = v
	}
	if kv["type"] != "cache" || kv["target"] == "" {
		return Mount{}, fmt.Errorf("--mount=%s: only type=cache with a target is reproduced here", spec)
	}
	target := path.Clean("/" + kv["target"])
	var src string
	if from := kv["from"]; from != "" {
		st, ok := stages[from]
		if !ok {
			return Mount{}, fmt.Errorf("--mount from=%s: no such stage", from)
		}
		src = filepath.Join(st.root, filepath.FromSlash(path.Clean("/"+kv["source"])))
	} else {
		id := kv["id"]
		if id == "" {
			id = target
		}
		sum := sha256.Sum256([]byte(id))
		src = filepath.Join(opts.Cache, "run-cache", hex.EncodeToString(sum[:8]))
	}
	if err := os.MkdirAll(src, 0o755); err != nil {
		return Mount{}, err
	}
	return Mount{Source: src, Destination: target}, nil
}

func hasEnv(env []string, k string) bool {
	for _, e := range env {
		if strings.HasPrefix(e, k+"=") {
			return true
		}
	}
	return false
}

func firstLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 120 {
		s = s[:120] + "..."
	}
	return s
}

func tail(out []byte, lines int) string {
	l := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(l) > lines {
		l = l[len(l)-lines:]
	}
	return strings.Join(l, "\n")
}
