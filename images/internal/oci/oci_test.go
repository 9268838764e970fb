package oci

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func testImage() Image {
	return Image{
		Ref: "ghcr.io/gpuhub/x:0.1.0",
		Config: Config{User: "65532", Entrypoint: []string{"/usr/local/bin/x"}, Env: []string{"PATH=/bin"},
			ExposedPorts: map[string]struct{}{"8080/tcp": {}}},
		Layers: []Layer{
			{
				{Path: "/lib/x86_64-linux-gnu/libc.so.6", Mode: 0o755, Data: []byte("libc")},
				{Path: "/lib64/ld-linux-x86-64.so.2", Mode: fs.ModeSymlink | 0o777, Link: "/lib/x86_64-linux-gnu/ld.so"},
				{Path: "/lib/x86_64-linux-gnu/ld.so", Mode: 0o755, Data: []byte("ld")},
				{Path: "/tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777},
				{Path: "/etc/gone", Mode: 0o644, Data: []byte("x")},
			},
			{
				{Path: "/usr/local/bin/x", Mode: 0o755, UID: 0, GID: 0, Data: []byte("\x7fELF")},
				{Path: "/etc/.wh.gone", Mode: 0o644},
			},
		},
	}
}

func TestWriteRead(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "x")
	if _, err := Write(dir, "amd64", testImage()); err != nil {
		t.Fatal(err)
	}
	img, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(testImage().Config, img.Config); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
	if img.Ref != "ghcr.io/gpuhub/x:0.1.0" || img.Architecture != "amd64" {
		t.Errorf("ref %q arch %q", img.Ref, img.Architecture)
	}
	if _, ok := img.Files["/etc/gone"]; ok {
		t.Error("/etc/gone survived its whiteout")
	}
	if f := img.Files["/usr/local/bin"]; !f.Mode.IsDir() {
		t.Errorf("parent /usr/local/bin not added as a directory: %v", f.Mode)
	}
	if f := img.Files["/tmp"]; f.Mode != fs.ModeDir|fs.ModeSticky|0o777 {
		t.Errorf("/tmp mode %v, want sticky 0777", f.Mode)
	}
	ld, err := img.Resolve("/lib64/ld-linux-x86-64.so.2")
	if err != nil || string(ld.Data) != "ld" {
		t.Errorf("Resolve through a symlink: %q, %v", ld.Data, err)
	}
	if _, err := img.Resolve("/nope"); err == nil {
		t.Error("Resolve of a missing path: no error")
	}
}

func TestWriteReproducible(t *testing.T) {
	a, err := Write(filepath.Join(t.TempDir(), "a"), "amd64", testImage())
	if err != nil {
		t.Fatal(err)
	}
	b, err := Write(filepath.Join(t.TempDir(), "b"), "amd64", testImage())
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Errorf("same inputs, different manifests: %s, %s", a, b)
	}
}

func TestReadRejectsTamperedBlob(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "x")
	if _, err := Write(dir, "amd64", testImage()); err != nil {
		t.Fatal(err)
	}
	blobs, err := filepath.Glob(filepath.Join(dir, "blobs", "sha256", "*"))
	if err != nil || len(blobs) == 0 {
		t.Fatal(blobs, err)
	}
	for _, b := range blobs {
		data, err := os.ReadFile(b)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.HasPrefix(data, []byte{0x1f, 0x8b}) { // a gzipped layer
			data[len(data)-1] ^= 0xff
			if err := os.WriteFile(b, data, 0o644); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	if _, err := Read(dir); err == nil {
		t.Error("Read accepted a layer whose bytes do not match its digest")
	}
}

func TestArchive(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "x")
	if _, err := Write(dir, "amd64", testImage()); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := Archive(dir, &buf); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"oci-layout", "index.json", "blobs/sha256/"} {
		if !bytes.Contains(buf.Bytes(), []byte(want)) {
			t.Errorf("archive has no %s", want)
		}
	}
}
