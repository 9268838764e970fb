// Package oci writes and reads container images as OCI image layouts (image-spec v1.1): a directory with
// oci-layout, index.json and content-addressed blobs, and the same as one tar archive, which containerd
// (`ctr images import`), podman, skopeo and buildah load as they are. No Docker engine or registry is needed.
//
// Layers are reproducible: entries sorted, timestamps fixed, owners numeric, so the same inputs give the same
// digests on every machine.
package oci

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Media types of image-spec v1.1.
const (
	MediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	MediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	MediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	MediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"

	// AnnotationRefName names an image inside a layout (what `ctr images import` tags it as).
	AnnotationRefName = "org.opencontainers.image.ref.name"
)

// Epoch is every entry's modification time: a fixed time makes layers reproducible (SOURCE_DATE_EPOCH = 0).
var Epoch = time.Unix(0, 0).UTC()

// File is one entry of a layer. Path is absolute inside the image ("/usr/local/bin/x").
type File struct {
	Path     string
	Mode     fs.FileMode // permission bits plus fs.ModeDir or fs.ModeSymlink
	UID, GID int
	Data     []byte // regular files
	Link     string // symlinks
}

// Layer is a set of entries; parent directories missing from it are added (0755, root).
type Layer []File

// Config is the part of the image configuration a runtime acts on (image-spec config.md "config").
type Config struct {
	User         string              `json:"User,omitempty"`
	ExposedPorts map[string]struct{} `json:"ExposedPorts,omitempty"`
	Env          []string            `json:"Env,omitempty"`
	Entrypoint   []string            `json:"Entrypoint,omitempty"`
	Cmd          []string            `json:"Cmd,omitempty"`
	WorkingDir   string              `json:"WorkingDir,omitempty"`
	Labels       map[string]string   `json:"Labels,omitempty"`
}

// Image is what Write stores: a reference name, its configuration and layers from the bottom up.
type Image struct {
	Ref    string // e.g. ghcr.io/gpuhub/gpu-quota:0.1.0
	Config Config
	Layers []Layer
}

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    *platform         `json:"platform,omitempty"`
}

type platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

type manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        descriptor   `json:"config"`
	Layers        []descriptor `json:"layers"`
}

type index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []descriptor `json:"manifests"`
}

type imageConfig struct {
	Architecture string  `json:"architecture"`
	OS           string  `json:"os"`
	Created      string  `json:"created"`
	Config       Config  `json:"config"`
	RootFS       rootFS  `json:"rootfs"`
	History      []entry `json:"history,omitempty"`
}

type rootFS struct {
	Type    string   `json:"type"`
	DiffIDs []string `json:"diff_ids"`
}

type entry struct {
	Created   string `json:"created"`
	CreatedBy string `json:"created_by"`
}

// Write stores img as an OCI image layout in dir (created or replaced) and returns the manifest's digest.
// arch is a GOARCH name (amd64, arm64), as image-spec's platform uses it.
func Write(dir, arch string, img Image) (string, error) {
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	blobs := filepath.Join(dir, "blobs", "sha256")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		return "", err
	}
	put := func(mediaType string, data []byte) (descriptor, error) {
		sum := sha256.Sum256(data)
		hexSum := hex.EncodeToString(sum[:])
		if err := os.WriteFile(filepath.Join(blobs, hexSum), data, 0o644); err != nil {
			return descriptor{}, err
		}
		return descriptor{MediaType: mediaType, Digest: "sha256:" + hexSum, Size: int64(len(data))}, nil
	}
	created := Epoch.Format(time.RFC3339)
	cfg := imageConfig{Architecture: arch, OS: "linux", Created: created, Config: img.Config, RootFS: rootFS{Type: "layers"}}
	m := manifest{SchemaVersion: 2, MediaType: MediaTypeManifest}
	for i, l := range img.Layers {
		raw, err := tarLayer(l)
		if err != nil {
			return "", fmt.Errorf("layer %d: %w", i, err)
		}
		diff := sha256.Sum256(raw)
		gz, err := gzipped(raw)
		if err != nil {
			return "", err
		}
		d, err := put(MediaTypeLayer, gz)
		if err != nil {
			return "", err
		}
		m.Layers = append(m.Layers, d)
		cfg.RootFS.DiffIDs = append(cfg.RootFS.DiffIDs, "sha256:"+hex.EncodeToString(diff[:]))
		cfg.History = append(cfg.History, entry{Created: created, CreatedBy: fmt.Sprintf("gpuhub images: layer %d", i)})
	}
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return "", err
	}
	if m.Config, err = put(MediaTypeConfig, cfgJSON); err != nil {
		return "", err
	}
	mJSON, err := json.Marshal(m)
	if err != nil {
		return "", err
	}
	md, err := put(MediaTypeManifest, mJSON)
	if err != nil {
		return "", err
	}
	md.Annotations = map[string]string{AnnotationRefName: img.Ref}
	md.Platform = &platform{Architecture: arch, OS: "linux"}
	idx, err := json.Marshal(index{SchemaVersion: 2, MediaType: MediaTypeIndex, Manifests: []descriptor{md}})
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "index.json"), idx, 0o644); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644); err != nil {
		return "", err
	}
	return md.Digest, nil
}

// Archive writes the layout in dir as one tar stream (the OCI archive `ctr images import` takes).
func Archive(dir string, w io.Writer) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		hdr := &tar.Header{Name: filepath.ToSlash(rel), ModTime: Epoch, Mode: 0o644, Typeflag: tar.TypeReg, Size: info.Size(), Format: tar.FormatPAX}
		if d.IsDir() {
			hdr.Name += "/"
			hdr.Mode, hdr.Typeflag, hdr.Size = 0o755, tar.TypeDir, 0
			return tw.WriteHeader(hdr)
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// tarLayer writes l as an uncompressed tar, parents first, entries sorted by path.
func tarLayer(l Layer) ([]byte, error) {
	byPath := map[string]File{}
	for _, f := range l {
		p := path.Clean("/" + f.Path)
		if p == "/" {
			continue
		}
		f.Path = p
		byPath[p] = f
		for dir := path.Dir(p); dir != "/"; dir = path.Dir(dir) {
			if _, ok := byPath[dir]; !ok {
				byPath[dir] = File{Path: dir, Mode: fs.ModeDir | 0o755}
			}
		}
	}
	paths := make([]string, 0, len(byPath))
	for p := range byPath {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		f := byPath[p]
		hdr := &tar.Header{Name: strings.TrimPrefix(p, "/"), Mode: tarMode(f.Mode), Uid: f.UID, Gid: f.GID, ModTime: Epoch, Format: tar.FormatPAX}
		switch {
		case f.Mode.IsDir():
			hdr.Typeflag, hdr.Name = tar.TypeDir, hdr.Name+"/"
		case f.Mode&fs.ModeSymlink != 0:
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, f.Link
		case f.Mode.IsRegular():
			hdr.Typeflag, hdr.Size = tar.TypeReg, int64(len(f.Data))
		default:
			return nil, fmt.Errorf("%s: unsupported file type %v", p, f.Mode.Type())
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if hdr.Typeflag == tar.TypeReg {
			if _, err := tw.Write(f.Data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// tarMode is the mode word of a tar header: permission bits and setuid (04000), setgid (02000), sticky (01000).
func tarMode(m fs.FileMode) int64 {
	mode := int64(m.Perm())
	if m&fs.ModeSetuid != 0 {
		mode |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		mode |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		mode |= 0o1000
	}
	return mode
}

func gzipped(raw []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	if err != nil {
		return nil, err
	}
	zw.ModTime = Epoch
	if _, err := zw.Write(raw); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Loaded is an image read back from a layout: its reference, configuration and merged file tree.
type Loaded struct {
	Ref          string
	Architecture string
	Config       Config
	// Files maps each path ("/usr/local/bin/x") to its entry in the topmost layer that holds it.
	Files map[string]File
}

// Read loads the one image of the layout in dir, checking every blob against its digest and each layer
// against its diff_id, and applying the layers in order (whiteouts included).
func Read(dir string) (*Loaded, error) {
	blob := func(d descriptor) ([]byte, error) {
		hexSum, ok := strings.CutPrefix(d.Digest, "sha256:")
		if !ok {
			return nil, fmt.Errorf("digest %q: only sha256 is written here", d.Digest)
		}
		data, err := os.ReadFile(filepath.Join(dir, "blobs", "sha256", hexSum))
		if err != nil {
			return nil, err
		}
		if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != hexSum || int64(len(data)) != d.Size {
			return nil, fmt.Errorf("blob %s: content does not match its descriptor", d.Digest)
		}
		return data, nil
	}
	var idx index
	if err := readJSON(filepath.Join(dir, "index.json"), &idx); err != nil {
		return nil, err
	}
	if len(idx.Manifests) != 1 {
		return nil, fmt.Errorf("%s: %d manifests in index.json, want 1", dir, len(idx.Manifests))
	}
	mdata, err := blob(idx.Manifests[0])
	if err != nil {
		return nil, err
	}
	var m manifest
	if err := json.Unmarshal(mdata, &m); err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	cdata, err := blob(m.Config)
	if err != nil {
		return nil, err
	}
	var cfg imageConfig
	if err := json.Unmarshal(cdata, &cfg); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if len(cfg.RootFS.DiffIDs) != len(m.Layers) {
		return nil, fmt.Errorf("%d diff_ids for %d layers", len(cfg.RootFS.DiffIDs), len(m.Layers))
	}
	out := &Loaded{Ref: idx.Manifests[0].Annotations[AnnotationRefName], Architecture: cfg.Architecture, Config: cfg.Config, Files: map[string]File{}}
	for i, ld := range m.Layers {
		gz, err := blob(ld)
		if err != nil {
			return nil, err
		}
		if err := out.apply(gz, cfg.RootFS.DiffIDs[i]); err != nil {
			return nil, fmt.Errorf("layer %d: %w", i, err)
		}
	}
	return out, nil
}

func (l *Loaded) apply(gz []byte, diffID string) error {
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return err
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		return err
	}
	if sum := sha256.Sum256(raw); "sha256:"+hex.EncodeToString(sum[:]) != diffID {
		return errors.New("uncompressed layer does not match its diff_id")
	}
	layer, err := ReadTar(bytes.NewReader(raw), nil)
	if err != nil {
		return err
	}
	for _, f := range layer {
		if base := path.Base(f.Path); strings.HasPrefix(base, ".wh.") {
			gone := path.Join(path.Dir(f.Path), strings.TrimPrefix(base, ".wh."))
			for q := range l.Files {
				if q == gone || strings.HasPrefix(q, gone+"/") {
					delete(l.Files, q)
				}
			}
			continue
		}
		l.Files[f.Path] = f
	}
	return nil
}

// ReadTar reads a tar stream (a layer, a root filesystem, a package's files) into entries in stream order,
// with their owners and mode bits (setuid, setgid, sticky included). A hard link becomes a copy of the earlier
// entry it names; devices, pipes and sockets are left out (a runtime provides /dev). keep, when set, says which
// paths ("/etc/x") to read.
func ReadTar(r io.Reader, keep func(path string) bool) (Layer, error) {
	var layer Layer
	index := map[string]int{}
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return layer, nil
		}
		if err != nil {
			return nil, err
		}
		p := path.Clean("/" + hdr.Name)
		if p == "/" || (keep != nil && !keep(p)) {
			continue
		}
		f := File{Path: p, Mode: fileMode(hdr.Mode), UID: hdr.Uid, GID: hdr.Gid}
		switch hdr.Typeflag {
		case tar.TypeDir:
			f.Mode |= fs.ModeDir
		case tar.TypeSymlink:
			f.Mode, f.Link = f.Mode|fs.ModeSymlink, hdr.Linkname
		case tar.TypeReg:
			if f.Data, err = io.ReadAll(tr); err != nil {
				return nil, err
			}
		case tar.TypeLink:
			i, ok := index[path.Clean("/"+hdr.Linkname)]
			if !ok {
				return nil, fmt.Errorf("%s: hard link to missing %s", p, hdr.Linkname)
			}
			f.Data = layer[i].Data
		default:
			continue
		}
		index[p] = len(layer)
		layer = append(layer, f)
	}
}

// fileMode is tarMode's inverse: a tar header's mode word as permission bits plus setuid, setgid and sticky.
func fileMode(mode int64) fs.FileMode {
	m := fs.FileMode(mode).Perm()
	if mode&0o4000 != 0 {
		m |= fs.ModeSetuid
	}
	if mode&0o2000 != 0 {
		m |= fs.ModeSetgid
	}
	if mode&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	return m
}

// Layer returns the merged file tree as one layer.
func (l *Loaded) Layer() Layer {
	out := make(Layer, 0, len(l.Files))
	for _, f := range l.Files {
		out = append(out, f)
	}
	return out
}

// Resolve follows symlinks (at most 40, like the kernel) and returns the entry p finally names.
func (l *Loaded) Resolve(p string) (File, error) {
	p = path.Clean("/" + p)
	for range 40 {
		// Resolve the directories first: /lib64 may itself be a link.
		parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
		cur := "/"
		changed := false
		for i, part := range parts {
			next := path.Join(cur, part)
			f, ok := l.Files[next]
			if !ok {
				return File{}, fmt.Errorf("%s: %s does not exist in the image", p, next)
			}
			if f.Mode&fs.ModeSymlink != 0 {
				target := f.Link
				if !path.IsAbs(target) {
					target = path.Join(cur, target)
				}
				p = path.Join(append([]string{target}, parts[i+1:]...)...)
				changed = true
				break
			}
			cur = next
		}
		if !changed {
			return l.Files[p], nil
		}
	}
	return File{}, fmt.Errorf("%s: too many levels of symbolic links", p)
}

func readJSON(p string, v any) error {
	data, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	return nil
}
