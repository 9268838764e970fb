//go:build images

// The images built here (make images) against the Dockerfiles users build with Docker: what each recipe
// declares (image name, user, entrypoint, command, ports, environment, working directory, copied files) is
// what the built image has, its entrypoint can run from the image's own files, and it runs in a real
// container (runc) as the declared user. Run by `make images-test` after `make images`.
package images

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuhub/gpuhub/images/internal/build"
	"github.com/gpuhub/gpuhub/images/internal/dockerfile"
	"github.com/gpuhub/gpuhub/images/internal/oci"
)

// smoke is what each image runs in its container, after its entrypoint, and what the output must contain:
// each image starts its program from its own files as its own user. TestEveryRecipeBuilt fails when a
// recipe has no entry.
var smoke = map[string]struct {
	args []string
	want string
}{
	"gpu-agent":               {args: []string{"-h"}, want: "Usage"},
	"gpu-culler":              {args: []string{"-h"}, want: "Usage"},
	"gpu-profiles":            {args: []string{"-h"}, want: "Usage"},
	"gpu-quota":               {args: []string{"-h"}, want: "Usage"},
	"usage-api":               {args: []string{"-h"}, want: "Usage"},
	"configurable-http-proxy": {args: []string{"--version"}, want: "5.2.0"},
	"pause":                   {args: []string{"-v"}, want: "pause (gpuhub) 0.1.0"},
	// The version z2jh 4.4.0's user-scheduler pins (TestUserSchedulerPins).
	"kube-scheduler": {args: []string{"--version"}, want: "Kubernetes v1.30.14"},
	// The panel is installed and enabled in the single-user environment, next to JupyterLab 4.
	"singleuser": {args: []string{"jupyter", "labextension", "list"}, want: "@gpuhub/jupyterlab-gpu-panel v0.1.0 enabled"},
	// z2jh 4.4.0's pins: JupyterHub 5.5.0, with KubeSpawner importable.
	"k8s-hub": {args: []string{"sh", "-c", "jupyterhub --version && python3 -c 'import kubespawner; print(\"kubespawner\", kubespawner.__version__)'"}, want: "kubespawner 7.0.0"},
	// No entrypoint, as upstream's (z2jh's Job gives the command): the flags it takes, without a cluster.
	"k8s-image-awaiter": {args: []string{"/image-awaiter", "-help"}, want: "-pod-scheduling-wait-duration"},
	// iptables in legacy mode, as z2jh's Alpine 3.18 image has it (TestNetworkToolsAsZ2JHRunsIt runs z2jh's commands).
	"network-tools": {args: []string{"iptables", "--version"}, want: "iptables v1.8.9 (legacy)"},
}

// z2jhVersion is the z2jh release whose images are built here: its released chart tags its own images
// (quay.io/jupyterhub/k8s-*) with it, where the chart's source says "set-by-chartpress".
const z2jhVersion = "4.4.0"

func imagesDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("GPUHUB_IMAGES")
	if dir == "" {
		t.Fatal("GPUHUB_IMAGES is not set: run `make images-test` (it runs `make images` first)")
	}
	return dir
}

// recipes are make images' recipes, each parsed; the test runs in images/, so the paths are from there.
func recipes(t *testing.T) map[string]*dockerfile.File {
	t.Helper()
	z2jhImages := os.Getenv("GPUHUB_Z2JH_IMAGES")
	if z2jhImages == "" {
		z2jhImages = "../../shared/data/z2jh-4.4.0/images"
	}
	rs, err := build.Recipes(".", z2jhImages, z2jhVersion)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dockerfile.File{}
	for _, r := range rs {
		df, err := r.Parse()
		if err != nil {
			t.Fatal(err)
		}
		out[r.Name] = df
	}
	if len(out) < 12 {
		t.Fatalf("%d recipes, want the five services, the single-user image, pause, and z2jh's proxy, user-scheduler, hub, image-awaiter and network-tools", len(out))
	}
	return out
}

func TestEveryRecipeBuilt(t *testing.T) {
	dir := imagesDir(t)
	for name := range recipes(t) {
		if _, err := os.Stat(filepath.Join(dir, name, "index.json")); err != nil {
			t.Errorf("%s has no image built here: %v", name, err)
		}
		if _, ok := smoke[name]; !ok {
			t.Errorf("%s: no smoke command in images_test.go", name)
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

// copied is a COPY of the final stage and the commands of the RUNs after it.
type copied struct {
	dockerfile.Instruction
	laterRuns []string
}

func declaration(df *dockerfile.File) (declared, []copied) {
	d := declared{Ref: df.BuildTag}
	copies := declare(&d, df, df.Final())
	return d, copies
}

// declare applies what stage st and the stages or base equivalents it starts from declare, bottom up; it
// returns st's own COPY instructions, with a later RUN's text for each (a RUN may consume what was copied).
func declare(d *declared, df *dockerfile.File, st *dockerfile.Stage) []copied {
	switch {
	case df.Stage(st.From) != nil && df.Stage(st.From) != st:
		declare(d, df, df.Stage(st.From))
	case build.Equivalents[st.From] != "":
		base, err := dockerfile.ParseFile(filepath.Join("bases", build.Equivalents[st.From]))
		if err == nil {
			declare(d, base, base.Final())
		}
	}
	var copies []copied
	for _, in := range st.Instructions {
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
			d.WorkingDir = path.Join("/", d.WorkingDir, in.Args[0])
		case "COPY":
			copies = append(copies, copied{Instruction: in})
		case "RUN":
			for i := range copies {
				copies[i].laterRuns = append(copies[i].laterRuns, in.Args[0])
			}
		}
	}
	return copies
}

// consumedByRun: a RUN after the COPY names its destination (e.g. copies wheels to /tmp/wheels, installs
// and removes them), so the copied files need not be in the image.
func consumedByRun(c copied) bool {
	dest := strings.TrimSuffix(c.Args[len(c.Args)-1], "/")
	for _, run := range c.laterRuns {
		if strings.Contains(run, dest) {
			return true
		}
	}
	return false
}

func TestImagesMatchDockerfiles(t *testing.T) {
	dir := imagesDir(t)
	for name, df := range recipes(t) {
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
				if consumedByRun(c) {
					continue
				}
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
			checkRunnable(t, img, smoke[name].args)
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

// checkRunnable: the entrypoint (found on the image's PATH when not absolute) is executable; a script's
// interpreter is in the image; an ELF executable is of the image's architecture and, when dynamically linked,
// finds its loader and every library it needs among the image's own files. An image with neither entrypoint
// nor command (z2jh's image-awaiter: its Job gives the whole command) is checked on the command given, run.
func checkRunnable(t *testing.T, img *oci.Loaded, run []string) {
	t.Helper()
	entry := img.Config.Entrypoint
	if len(entry) == 0 {
		entry = img.Config.Cmd
	}
	if len(entry) == 0 {
		entry = run
	}
	if len(entry) == 0 {
		t.Fatal("no entrypoint and no command")
	}
	f, p, err := lookPath(img, entry[0])
	if err != nil {
		t.Fatalf("entrypoint: %v", err)
	}
	if f.Mode&0o111 == 0 {
		t.Fatalf("entrypoint %s is not executable", p)
	}
	if interp, ok := bytes.CutPrefix(f.Data, []byte("#!")); ok {
		line, _, _ := bytes.Cut(interp, []byte("\n"))
		words := strings.Fields(string(line))
		if len(words) == 0 {
			t.Fatalf("entrypoint %s: empty #! line", p)
		}
		prog := words[0]
		if path.Base(prog) == "env" && len(words) > 1 {
			prog = words[1]
		}
		if _, _, err := lookPath(img, prog); err != nil {
			t.Errorf("entrypoint %s is a script for %s: %v", p, prog, err)
		}
		return
	}
	bin, err := elf.NewFile(bytes.NewReader(f.Data))
	if err != nil {
		t.Fatalf("entrypoint %s: %v", p, err)
	}
	wantMachine := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[img.Architecture]
	if bin.Machine != wantMachine {
		t.Errorf("entrypoint %s is %v, the image says %s", p, bin.Machine, img.Architecture)
	}
	for _, prog := range bin.Progs {
		if prog.Type != elf.PT_INTERP {
			continue
		}
		data := make([]byte, prog.Filesz)
		if _, err := prog.ReadAt(data, 0); err != nil {
			t.Fatal(err)
		}
		interp := strings.TrimRight(string(data), "\x00")
		if _, err := img.Resolve(interp); err != nil {
			t.Errorf("entrypoint %s needs the loader %s: %v", p, interp, err)
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
		if !found {
			t.Errorf("entrypoint %s needs %s, which the image does not have", p, lib)
		}
	}
}

// lookPath finds prog as a shell would in the image: as it is when it has a slash, else on the image's PATH.
func lookPath(img *oci.Loaded, prog string) (oci.File, string, error) {
	if strings.Contains(prog, "/") {
		f, err := img.Resolve(prog)
		return f, prog, err
	}
	pathVar := ""
	for _, e := range img.Config.Env {
		if v, ok := strings.CutPrefix(e, "PATH="); ok {
			pathVar = v
		}
	}
	for _, dir := range strings.Split(pathVar, ":") {
		p := path.Join(dir, prog)
		if f, err := img.Resolve(p); err == nil && !f.Mode.IsDir() {
			return f, p, nil
		}
	}
	return oci.File{}, "", fmt.Errorf("%s: not on the image's PATH %q", prog, pathVar)
}

// TestImagesRunInContainer runs each image in a real container (runc, Debian's package): its own root
// filesystem unpacked from the layers, read-only, as the image's user, in new namespaces with no network
// (only loopback), with the smoke command after the entrypoint.
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
		t.Run(name, func(t *testing.T) {
			img, err := oci.Read(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			rootfs := filepath.Join(t.TempDir(), "rootfs")
			if err := build.WriteTree(rootfs, img.Layer()); err != nil {
				t.Fatal(err)
			}
			uid, gid, err := build.UserIDs(rootfs, img.Config.User)
			if err != nil {
				t.Fatal(err)
			}
			sm := smoke[name]
			args := append(slices.Clone(img.Config.Entrypoint), sm.args...)
			p := build.Process{Args: args, Env: img.Config.Env, Cwd: img.Config.WorkingDir, UID: uid, GID: gid}
			if uid == 0 {
				p.Caps = []string{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_KILL", "CAP_SETGID", "CAP_SETUID"}
			}
			// A read-only root with a writable /tmp, as a pod with an emptyDir there has.
			spec := build.RuntimeSpec(rootfs, true, false, p, nil)
			spec["mounts"] = append(spec["mounts"].([]map[string]any), map[string]any{"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": []string{"nosuid", "nodev", "mode=1777"}})
			out, err := build.RunContainer(t.Context(), runc, fmt.Sprintf("gpuhub-image-test-%s-%d", name, os.Getpid()), spec)
			if err != nil {
				t.Fatalf("%s %v in its container: %v\n%s", img.Ref, args, err, out)
			}
			// Without the colours some programs print even with no terminal.
			out = regexp.MustCompile("\x1b\\[[0-9;]*m").ReplaceAll(out, nil)
			if !strings.Contains(string(out), sm.want) {
				t.Errorf("%s %v in its container printed no %q:\n%s", img.Ref, args, sm.want, out)
			}
			t.Logf("%s ran %v in a container as %d:%d", img.Ref, args, uid, gid)
		})
	}
}

// TestBasesKnown: every FROM of every recipe is something the builder makes (a renamed base tag in a
// Dockerfile fails here, not at build time on someone's machine).
func TestBasesKnown(t *testing.T) {
	for _, df := range recipes(t) {
		for _, s := range df.Stages {
			if !build.Known(df, s.From) {
				t.Errorf("%s: FROM %s: not a stage, a Go toolchain, a distroless or Debian base, or an images/bases equivalent", df.Path, s.From)
			}
		}
	}
}

// TestUserSchedulerPins: the kube-scheduler image is the one z2jh 4.4.0's user-scheduler names
// (scheduling.userScheduler.image, in the repository's copy of z2jh's values), and its recipe, its build
// module (e2e/userschedulerbuild) and its smoke command agree on the version.
func TestUserSchedulerPins(t *testing.T) {
	values, err := os.ReadFile("../chart/testdata/z2jh-4.4.0/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`name: (registry\.k8s\.io/kube-scheduler)\n(?:\s*#.*\n)*\s*tag: "([^"]+)"`).FindSubmatch(values)
	if m == nil {
		t.Fatal("z2jh's values name no registry.k8s.io/kube-scheduler image with a tag")
	}
	ref, version := string(m[1])+":"+string(m[2]), string(m[2])
	df := recipes(t)["kube-scheduler"]
	if df == nil {
		t.Fatal("no kube-scheduler recipe")
	}
	if df.BuildTag != ref {
		t.Errorf("%s builds %s, z2jh runs %s", df.Path, df.BuildTag, ref)
	}
	var ldflags string
	for _, in := range df.Stage("build").Instructions {
		if in.Cmd == "RUN" && strings.Contains(in.Args[0], "go build") {
			ldflags = in.Args[0]
		}
	}
	if !strings.Contains(ldflags, "version.gitVersion="+version+" ") {
		t.Errorf("%s: the go build sets no gitVersion=%s: %s", df.Path, version, ldflags)
	}
	gomod, err := os.ReadFile("../e2e/userschedulerbuild/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^require k8s\.io/kubernetes ` + regexp.QuoteMeta(version) + `$`).Match(gomod) {
		t.Errorf("e2e/userschedulerbuild/go.mod does not require k8s.io/kubernetes %s", version)
	}
	if want := "Kubernetes " + version; smoke["kube-scheduler"].want != want {
		t.Errorf("smoke command wants %q, not %q", smoke["kube-scheduler"].want, want)
	}
}

// TestNetworkToolsAsZ2JHRunsIt runs network-tools as z2jh 4.4.0 does: KubeSpawner's block-cloud-metadata init
// container (jupyterhub_config.py: root, privileged, NET_ADMIN, a writable root filesystem) runs its iptables
// command in the pod's network namespace, here the container's own, and the rule must land in the legacy
// (x_tables) tables; the image-puller's init container (prePuller.containerSecurityContext: 65534:65534, every
// capability dropped) runs its /bin/sh command.
func TestNetworkToolsAsZ2JHRunsIt(t *testing.T) {
	runc, err := exec.LookPath("runc")
	if err != nil {
		t.Fatal("runc not found: `make images-test` installs Debian's runc package")
	}
	if os.Geteuid() != 0 {
		t.Fatal("running a container needs root here (CI and the dev machines run as root)")
	}
	img, err := oci.Read(filepath.Join(imagesDir(t), "network-tools"))
	if err != nil {
		t.Fatal(err)
	}
	// z2jh 4.4.0's files/hub/jupyterhub_config.py, with singleuser.cloudMetadata.ip's default.
	block := []string{"iptables", "--append", "OUTPUT", "--protocol", "tcp", "--destination", "169.254.169.254", "--destination-port", "80", "--jump", "DROP"}
	privileged := []string{
		"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW", "CAP_SETGID", "CAP_SETUID",
		"CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE", "CAP_NET_ADMIN",
	}
	tests := map[string]struct {
		args     []string
		uid      int
		caps     []string
		readOnly bool
		want     string
	}{
		// z2jh's command as it is ("$@"), then the legacy tables listed by iptables-legacy itself.
		"block-cloud-metadata": {
			args: append([]string{"/bin/sh", "-c", `"$@" && iptables-legacy -S OUTPUT`, "sh"}, block...),
			caps: privileged, want: "-A OUTPUT -d 169.254.169.254/32 -p tcp -m tcp --dport 80 -j DROP",
		},
		// z2jh's templates/image-puller/_helpers-daemonset.tpl.
		"image-pull-metadata-block": {
			args: []string{"/bin/sh", "-c", `echo "Pulling complete"`}, uid: 65534, readOnly: true, want: "Pulling complete",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			rootfs := filepath.Join(t.TempDir(), "rootfs")
			if err := build.WriteTree(rootfs, img.Layer()); err != nil {
				t.Fatal(err)
			}
			p := build.Process{Args: tc.args, Env: img.Config.Env, Cwd: img.Config.WorkingDir, UID: tc.uid, GID: tc.uid, Caps: tc.caps}
			// A network namespace of the container's own (only loopback): the host's rules are not touched.
			spec := build.RuntimeSpec(rootfs, tc.readOnly, false, p, nil)
			out, err := build.RunContainer(t.Context(), runc, fmt.Sprintf("gpuhub-network-tools-%s-%d", name, os.Getpid()), spec)
			if err != nil {
				t.Fatalf("%v in its container: %v\n%s", tc.args, err, out)
			}
			if !strings.Contains(string(out), tc.want) {
				t.Errorf("%v printed no %q:\n%s", tc.args, tc.want, out)
			}
		})
	}
}

// TestZ2JHImageNames: each of z2jh's own images built here (quay.io/jupyterhub/k8s-*) is one z2jh 4.4.0's
// values name (the repository's copy), whose tag the released chart sets to its version.
func TestZ2JHImageNames(t *testing.T) {
	values, err := os.ReadFile("../chart/testdata/z2jh-4.4.0/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	named := map[string]string{}
	for _, m := range regexp.MustCompile(`name: (quay\.io/jupyterhub/k8s-[a-z-]+)\n\s*tag: "([^"]+)"`).FindAllSubmatch(values, -1) {
		named[string(m[1])] = string(m[2])
	}
	built := 0
	for name, df := range recipes(t) {
		repo, tag, _ := strings.Cut(df.BuildTag, ":")
		if !strings.HasPrefix(repo, "quay.io/jupyterhub/k8s-") {
			continue
		}
		built++
		if _, ok := named[repo]; !ok {
			t.Errorf("%s builds %s, an image z2jh's values do not name (they name %v)", name, df.BuildTag, named)
		}
		if tag != z2jhVersion {
			t.Errorf("%s builds %s, not z2jh's version %s", name, df.BuildTag, z2jhVersion)
		}
		if named[repo] != "set-by-chartpress" {
			t.Errorf("z2jh's values tag %s %q: the chart no longer takes its own version", repo, named[repo])
		}
	}
	if built != 3 {
		t.Errorf("%d of z2jh's own images built, want k8s-hub, k8s-image-awaiter and k8s-network-tools", built)
	}
}
