package build

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/gpuhub/gpuhub/images/internal/oci"
)

// Base is a Debian-built stand-in for an upstream base image: the same users, paths and configuration, made
// from Debian 12 packages, since no registry can be reached here.
type Base struct {
	Name     string
	Packages []string // Debian packages whose files the base holds (documentation left out)
	// Build makes the base's layer and configuration.
	Build func(debs *DebianDebs) (oci.Layer, oci.Config, error)
}

// distroless: users root, nobody and nonroot (65532), /tmp, /home/nonroot, CA certificates, time zones,
// netbase's /etc/services and os-release, as gcr.io/distroless/static-debian12 documents them; the base
// variant adds glibc (libc6). The :nonroot tags run as 65532 in /home/nonroot, the root ones (:latest) as 0 in /.
var distrolessStatic = []string{"ca-certificates", "tzdata", "netbase", "base-files"}

// Bases maps each FROM of the final stages in images/ to its Debian-built equivalent.
var Bases = map[string]Base{
	"gcr.io/distroless/static-debian12:nonroot": {Name: "distroless-static-nonroot (Debian 12 packages)", Packages: distrolessStatic, Build: func(d *DebianDebs) (oci.Layer, oci.Config, error) {
		return distroless(d, distrolessStatic)
	}},
	// go-runner's base, under the kube-scheduler of z2jh's user-scheduler.
	"gcr.io/distroless/static-debian12:latest": {Name: "distroless-static (Debian 12 packages)", Packages: distrolessStatic, Build: func(d *DebianDebs) (oci.Layer, oci.Config, error) {
		layer, cfg, err := distroless(d, distrolessStatic)
		cfg.User, cfg.WorkingDir = "0", "/"
		return layer, cfg, err
	}},
	"gcr.io/distroless/base-debian12:nonroot": {Name: "distroless-base-nonroot (Debian 12 packages)", Packages: append(slices.Clone(distrolessStatic), "libc6"), Build: func(d *DebianDebs) (oci.Layer, oci.Config, error) {
		return distroless(d, append(slices.Clone(distrolessStatic), "libc6"))
	}},
}

func baseNames() []string {
	var out []string
	for k := range Bases {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func distroless(debs *DebianDebs, pkgs []string) (oci.Layer, oci.Config, error) {
	var layer oci.Layer
	var certs []string
	certData := map[string][]byte{}
	for _, pkg := range pkgs {
		files, err := debs.Files(pkg)
		if err != nil {
			return nil, oci.Config{}, err
		}
		for _, f := range files {
			switch {
			case pkg == "base-files" && f.Path != "/usr/lib/os-release" && f.Path != "/etc/os-release":
				continue // distroless takes only os-release from base-files
			case strings.HasPrefix(f.Path, "/usr/share/ca-certificates/") && strings.HasSuffix(f.Path, ".crt"):
				certs = append(certs, f.Path)
				certData[f.Path] = f.Data
			}
			layer = append(layer, f)
		}
	}
	// What update-ca-certificates makes at install time: one bundle of every certificate, in path order.
	sort.Strings(certs)
	var bundle bytes.Buffer
	for _, c := range certs {
		bundle.Write(certData[c])
		if !bytes.HasSuffix(certData[c], []byte("\n")) {
			bundle.WriteByte('\n')
		}
	}
	layer = append(layer,
		oci.File{Path: "/etc/ssl/certs/ca-certificates.crt", Mode: 0o644, Data: bundle.Bytes()},
		oci.File{Path: "/etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		oci.File{Path: "/etc/group", Mode: 0o644, Data: []byte("root:x:0:\nnobody:x:65534:\ntty:x:5:\nstaff:x:50:\nnonroot:x:65532:\n")},
		oci.File{Path: "/etc/nsswitch.conf", Mode: 0o644, Data: []byte("passwd: files\ngroup: files\nhosts: files dns\n")},
		oci.File{Path: "/root", Mode: fs.ModeDir | 0o700},
		oci.File{Path: "/home/nonroot", Mode: fs.ModeDir | 0o700, UID: 65532, GID: 65532},
		oci.File{Path: "/tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777},
	)
	cfg := oci.Config{
		User:       "65532",
		WorkingDir: "/home/nonroot",
		Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"},
	}
	return layer, cfg, nil
}

// DebianDebs fetches Debian packages with `apt-get download` into Dir (once) and reads their files.
type DebianDebs struct {
	Dir     string
	AptGet  string // apt-get
	DpkgDeb string // dpkg-deb
	ctx     context.Context
}

// NewDebianDebs keeps downloaded packages in dir.
func NewDebianDebs(ctx context.Context, dir string) *DebianDebs {
	return &DebianDebs{Dir: dir, AptGet: "apt-get", DpkgDeb: "dpkg-deb", ctx: ctx}
}

// Deb returns the path of pkg's .deb, downloading the candidate version when none is there yet.
func (d *DebianDebs) Deb(pkg string) (string, error) {
	if err := os.MkdirAll(d.Dir, 0o755); err != nil {
		return "", err
	}
	find := func() string {
		m, _ := filepath.Glob(filepath.Join(d.Dir, pkg+"_*.deb"))
		if len(m) == 0 {
			return ""
		}
		sort.Strings(m)
		return m[len(m)-1]
	}
	if p := find(); p != "" {
		return p, nil
	}
	cmd := exec.CommandContext(d.ctx, d.AptGet, "download", "-q", pkg)
	cmd.Dir = d.Dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("apt-get download %s: %w: %s (run `apt-get update` once if the package lists are empty)", pkg, err, bytes.TrimSpace(out))
	}
	if p := find(); p != "" {
		return p, nil
	}
	return "", fmt.Errorf("apt-get download %s: no %s_*.deb in %s", pkg, pkg, d.Dir)
}

// Files reads pkg's files (dpkg-deb --fsys-tarfile) with the package's owners and modes, without documentation.
func (d *DebianDebs) Files(pkg string) ([]oci.File, error) {
	deb, err := d.Deb(pkg)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(d.ctx, d.DpkgDeb, "--fsys-tarfile", deb)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	data, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("dpkg-deb --fsys-tarfile %s: %w: %s", deb, err, stderr.String())
	}
	layer, err := oci.ReadTar(bytes.NewReader(data), func(p string) bool {
		return !strings.HasPrefix(p, "/usr/share/doc") && !strings.HasPrefix(p, "/usr/share/man") && !strings.HasPrefix(p, "/usr/share/lintian")
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", deb, err)
	}
	return layer, nil
}
