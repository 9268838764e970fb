//go:build images

// The images built here (make images) against the Dockerfiles users build with Docker: what each recipe
// declares (image name, user, entrypoint, command, ports, environment, working directory, copied files) is
// what the built image has, its entrypoint can run from the image's own files, and it runs in a real
// container (runc) as the declared user. Run by `make images-test` after `make images`.
package images

import (
	"bytes"
	"debug/elf"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuhub/gpuhub/images/internal/build"
	"github.com/gpuhub/gpuhub/images/internal/dockerfile"
	"github.com/gpuhub/gpuhub/images/internal/oci"
)

// builtHere lists the recipes whose images `make images` builds; TestEveryRecipeBuilt fails when a recipe
// is neither here nor in notBuiltHere, so a new Dockerfile cannot be forgotten.
var notBuiltHere = map[string]string{
	"singleuser": "its base is quay.io/jupyter/base-notebook (conda); the Debian-built single-user image is not made yet",
}

func imagesDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("GPUHUB_IMAGES")
	if dir == "" {
		t.Fatal("GPUHUB_IMAGES is not set: run `make images-test` (it runs `make images` first)")
	}
	return dir
}

func recipes(t *testing.T) map[string]*dockerfile.File {
	t.Helper()
	paths, err := filepath.Glob("*.Dockerfile")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no Dockerfiles in images/: %v", err)
	}
	out := map[string]*dockerfile.File{}
	for _, p := range paths {
		df, err := dockerfile.ParseFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out[strings.TrimSuffix(p, ".Dockerfile")] = df
	}
	return out
}

func TestEveryRecipeBuilt(t *testing.T) {
	dir := imagesDir(t)
	for name := range recipes(t) {
		_, skip := notBuiltHere[name]
		_, err := os.Stat(filepath.Join(dir, name, "index.json"))
		switch {
		case skip && err == nil:
			t.Errorf("%s is built now: take it out of notBuiltHere", name)
		case !skip && err != nil:
			t.Errorf("%s.Dockerfile has no image built here: %v", name, err)
		}
	}
}

// declared is what a Dockerfile's final stage says the image is.
type declared struct {
	Ref        string
	User       string
	Entrypoint []string
	Cmd        []string
	Ports      []string
	Env        []string
	WorkingDir string
}

func declaration(df *dockerfile.File) (declared, []dockerfile.Instruction) {
	d := declared{Ref: df.BuildTag}
	var copies []dockerfile.Instruction
	for _, in := range df.Final().Instructions {
		switch in.Cmd {
		case "USER":
			d.User = in.Args[0]
		case "ENTRYPOINT":
			d.Entrypoint, d.Cmd = in.Args, nil
		case "CMD":
			d.Cmd = in.Args
		case "EXPOSE":
			for _, p := range in.Args {
				if !strings.Contains(p, "/") {
					p += "/tcp"
				}
				d.Ports = append(d.Ports, p)
			}
		case "ENV":
			d.Env = append(d.Env, in.Args...)
		case "WORKDIR":
			d.WorkingDir = path.Join(d.WorkingDir, in.Args[0])
		case "COPY":
			copies = append(copies, in)
		}
	}
	return d, copies
}

func TestImagesMatchDockerfiles(t *testing.T) {
	dir := imagesDir(t)
	for name, df := range recipes(t) {
		if _, skip := notBuiltHere[name]; skip {
			continue
		}
		t.Run(name, func(t *testing.T) {
			img, err := oci.Read(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			want, copies := declaration(df)
			got := declared{Ref: img.Ref, User: img.Config.User, Entrypoint: img.Config.Entrypoint, Cmd: img.Config.Cmd, WorkingDir: img.Config.WorkingDir}
			for p := range img.Config.ExposedPorts {
				got.Ports = append(got.Ports, p)
			}
			slices.Sort(got.Ports)
			slices.Sort(want.Ports)
			for _, kv := range want.Env {
				if slices.Contains(img.Config.Env, kv) {
					got.Env = append(got.Env, kv)
				}
			}
			if want.WorkingDir == "" {
				want.WorkingDir = got.WorkingDir // the base's, as Docker keeps it
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("image config against %s (-declared +built):\n%s", df.Path, diff)
			}
			for _, c := range copies {
				dest := c.Args[len(c.Args)-1]
				if strings.HasSuffix(dest, "/") {
					for _, src := range c.Args[:len(c.Args)-1] {
						dest = path.Join(dest, path.Base(src))
					}
				}
				f, err := img.Resolve(dest)
				if err != nil {
					t.Errorf("%s:%d COPY: %v", df.Path, c.Line, err)
					continue
				}
				if c.Flags["from"] != "" && f.Mode&0o111 == 0 {
					t.Errorf("%s:%d COPY: %s is not executable (%v)", df.Path, c.Line, dest, f.Mode)
				}
			}
			checkUser(t, img, want.User)
			checkRunnable(t, img)
		})
	}
}

// checkUser: a named user exists in the image's /etc/passwd; a numeric one needs no entry, as in Docker.
func checkUser(t *testing.T, img *oci.Loaded, user string) {
	t.Helper()
	name, _, _ := strings.Cut(user, ":")
	if _, err := strconv.Atoi(name); err == nil || name == "" {
		return
	}
	passwd, err := img.Resolve("/etc/passwd")
	if err != nil {
		t.Fatalf("USER %s: %v", user, err)
	}
	if !bytes.Contains(passwd.Data, []byte("\n"+name+":")) && !bytes.HasPrefix(passwd.Data, []byte(name+":")) {
		t.Errorf("USER %s: not in the image's /etc/passwd", user)
	}
}

// checkRunnable: the entrypoint is an ELF executable of the image's architecture; a dynamically linked one
// finds its interpreter and every library it needs among the image's own files.
func checkRunnable(t *testing.T, img *oci.Loaded) {
	t.Helper()
	entry := img.Config.Entrypoint[0]
	f, err := img.Resolve(entry)
	if err != nil {
		t.Fatalf("entrypoint: %v", err)
	}
	if f.Mode&0o111 == 0 {
		t.Fatalf("entrypoint %s is not executable", entry)
	}
	bin, err := elf.NewFile(bytes.NewReader(f.Data))
	if err != nil {
		t.Fatalf("entrypoint %s: %v", entry, err)
	}
	wantMachine := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[img.Architecture]
	if bin.Machine != wantMachine {
		t.Errorf("entrypoint %s is %v, the image says %s", entry, bin.Machine, img.Architecture)
	}
	for _, p := range bin.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		data := make([]byte, p.Filesz)
		if _, err := p.ReadAt(data, 0); err != nil {
			t.Fatal(err)
		}
		interp := strings.TrimRight(string(data), "\x00")
		if _, err := img.Resolve(interp); err != nil {
			t.Errorf("entrypoint %s needs the interpreter %s: %v", entry, interp, err)
		}
	}
	libs, err := bin.ImportedLibraries()
	if err != nil {
		t.Fatal(err)
	}
	for _, lib := range libs {
		found := false
		for _, dir := range []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/lib", "/usr/lib", "/lib64"} {
			if _, err := img.Resolve(path.Join(dir, lib)); err == nil {
				found = true
				break
			}
		}
		// go-nvml's libnvidia-ml.so.1 is opened at run time (dlopen) from what the NVIDIA runtime mounts.
		if !found {
			t.Errorf("entrypoint %s needs %s, which the image does not have", entry, lib)
		}
	}
}

// TestImagesRunInContainer runs each image's entrypoint with -h in a real container (runc, Debian's
// package): its own root filesystem unpacked from the layers, read-only, as the image's user, in new
// namespaces with no network. It must print its usage and exit 0.
func TestImagesRunInContainer(t *testing.T) {
	runc, err := exec.LookPath("runc")
	if err != nil {
		t.Fatal("runc not found: `make images-test` installs Debian's runc package")
	}
	if os.Geteuid() != 0 {
		t.Fatal("running a container needs root here (CI and the dev machines run as root)")
	}
	dir := imagesDir(t)
	for name := range recipes(t) {
		if _, skip := notBuiltHere[name]; skip {
			continue
		}
		t.Run(name, func(t *testing.T) {
			img, err := oci.Read(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			bundle := t.TempDir()
			rootfs := filepath.Join(bundle, "rootfs")
			if err := unpack(img, rootfs); err != nil {
				t.Fatal(err)
			}
			uid, gid := userIDs(t, img)
			spec := runtimeSpec(img, uid, gid, []string{"-h"})
			data, err := json.MarshalIndent(spec, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(bundle, "config.json"), data, 0o644); err != nil {
				t.Fatal(err)
			}
			id := fmt.Sprintf("gpuhub-image-test-%s-%d", name, os.Getpid())
			cmd := exec.CommandContext(t.Context(), runc, "--root", filepath.Join(bundle, "state"), "run", "--bundle", bundle, id)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("runc run %s: %v\n%s", img.Ref, err, out)
			}
			if !strings.Contains(string(out), "Usage") && !strings.Contains(string(out), "usage") {
				t.Errorf("%s -h in its container printed no usage:\n%s", img.Config.Entrypoint[0], out)
			}
			t.Logf("%s ran in a container as %d:%d: %d bytes of usage", img.Ref, uid, gid, len(out))
		})
	}
}

// userIDs resolves the image's USER as Docker does: NAME or UID, optionally :GROUP or :GID; a UID with no
// group takes the passwd entry's group, or 0.
func userIDs(t *testing.T, img *oci.Loaded) (int, int) {
	t.Helper()
	user, group, hasGroup := strings.Cut(img.Config.User, ":")
	passwd, _ := img.Resolve("/etc/passwd")
	uid, gid := -1, 0
	for _, line := range strings.Split(string(passwd.Data), "\n") {
		f := strings.Split(line, ":")
		if len(f) < 4 || (f[0] != user && f[2] != user) {
			continue
		}
		uid, _ = strconv.Atoi(f[2])
		gid, _ = strconv.Atoi(f[3])
	}
	if uid < 0 {
		n, err := strconv.Atoi(user)
		if err != nil {
			t.Fatalf("USER %s: not numeric and not in /etc/passwd", img.Config.User)
		}
		uid = n
	}
	if hasGroup {
		n, err := strconv.Atoi(group)
		if err != nil {
			t.Fatalf("USER %s: only a numeric group is resolved here", img.Config.User)
		}
		gid = n
	}
	return uid, gid
}

func unpack(img *oci.Loaded, root string) error {
	paths := make([]string, 0, len(img.Files))
	for p := range img.Files {
		paths = append(paths, p)
	}
	slices.Sort(paths) // parents first
	for _, p := range paths {
		f := img.Files[p]
		dst := filepath.Join(root, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		switch {
		case f.Mode.IsDir():
			if err := os.MkdirAll(dst, f.Mode.Perm()); err != nil {
				return err
			}
		case f.Mode&fs.ModeSymlink != 0:
			if err := os.Symlink(f.Link, dst); err != nil {
				return err
			}
			continue
		default:
			if err := os.WriteFile(dst, f.Data, f.Mode.Perm()); err != nil {
				return err
			}
		}
		if err := os.Lchown(dst, f.UID, f.GID); err != nil {
			return err
		}
		if err := os.Chmod(dst, f.Mode.Perm()|f.Mode&(fs.ModeSticky|fs.ModeSetuid|fs.ModeSetgid)); err != nil {
			return err
		}
	}
	return nil
}

// runtimeSpec is an OCI runtime configuration for the image: read-only root, new PID, IPC, UTS, mount and
// network namespaces (no interface but loopback: nothing can leave), no capabilities for a non-root user.
func runtimeSpec(img *oci.Loaded, uid, gid int, extraArgs []string) map[string]any {
	cwd := img.Config.WorkingDir
	if cwd == "" {
		cwd = "/"
	}
	caps := []string{}
	if uid == 0 {
		caps = []string{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_KILL", "CAP_SETGID", "CAP_SETUID"}
	}
	return map[string]any{
		"ociVersion": "1.0.2",
		"process": map[string]any{
			"terminal": false,
			"user":     map[string]any{"uid": uid, "gid": gid},
			"args":     append(slices.Clone(append(img.Config.Entrypoint, img.Config.Cmd...)), extraArgs...),
			"env":      img.Config.Env,
			"cwd":      cwd,
			"capabilities": map[string]any{
				"bounding": caps, "effective": caps, "permitted": caps,
			},
			"noNewPrivileges": true,
		},
		"root":     map[string]any{"path": "rootfs", "readonly": true},
		"hostname": "image-test",
		"mounts": []map[string]any{
			{"destination": "/proc", "type": "proc", "source": "proc"},
			{"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": []string{"nosuid", "nodev", "mode=1777"}},
		},
		"linux": map[string]any{
			"namespaces":    []map[string]any{{"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}, {"type": "network"}},
			"maskedPaths":   []string{"/proc/kcore", "/proc/keys", "/sys/firmware"},
			"readonlyPaths": []string{"/proc/sys", "/proc/sysrq-trigger"},
		},
	}
}

// TestBasesKnown: every base a built recipe starts from has a Debian-built equivalent (a renamed base tag in
// a Dockerfile fails here, not at build time on someone's machine).
func TestBasesKnown(t *testing.T) {
	for name, df := range recipes(t) {
		if _, skip := notBuiltHere[name]; skip {
			continue
		}
		if _, ok := build.Bases[df.Final().From]; !ok {
			t.Errorf("%s: FROM %s has no entry in build.Bases", df.Path, df.Final().From)
		}
	}
}
