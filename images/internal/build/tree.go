package build

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/gpuhub/gpuhub/images/internal/oci"
)

// fileKey is what tells whether a stage changed a file: type and mode, owner, size, modification time, link.
type fileKey struct {
	mode     fs.FileMode
	uid, gid uint32
	size     int64
	mtime    int64
	link     string
}

// WriteTree creates layer's entries under dir, owners and modes included (it needs root): a stage's root
// filesystem, or an image unpacked for a container.
func WriteTree(dir string, layer oci.Layer) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	sorted := slices.Clone(layer)
	slices.SortFunc(sorted, func(a, b oci.File) int { return strings.Compare(a.Path, b.Path) }) // parents first
	for _, f := range sorted {
		dst := filepath.Join(dir, filepath.FromSlash(path.Clean("/"+f.Path)))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		switch {
		case f.Mode.IsDir():
			if err := os.MkdirAll(dst, 0o755); err != nil {
				return err
			}
		case f.Mode&fs.ModeSymlink != 0:
			if err := os.RemoveAll(dst); err != nil {
				return err
			}
			if err := os.Symlink(f.Link, dst); err != nil {
				return err
			}
			if err := os.Lchown(dst, f.UID, f.GID); err != nil {
				return err
			}
			continue
		default:
			if fi, err := os.Lstat(dst); err == nil && !fi.Mode().IsRegular() {
				if err := os.RemoveAll(dst); err != nil {
					return err
				}
			}
			if err := os.WriteFile(dst, f.Data, 0o600); err != nil {
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

// snapshot records every entry under dir.
func snapshot(dir string) (map[string]fileKey, error) {
	out := map[string]fileKey{}
	err := walkTree(dir, func(p string, fi fs.FileInfo, st *syscall.Stat_t, link string) error {
		out[p] = fileKey{mode: fi.Mode(), uid: st.Uid, gid: st.Gid, size: fi.Size(), mtime: fi.ModTime().UnixNano(), link: link}
		return nil
	})
	return out, err
}

// changes is the layer of what differs under dir from before: new or changed entries, and a whiteout for
// each topmost entry that is gone.
func changes(dir string, before map[string]fileKey) (oci.Layer, error) {
	var layer oci.Layer
	seen := map[string]bool{}
	err := walkTree(dir, func(p string, fi fs.FileInfo, st *syscall.Stat_t, link string) error {
		seen[p] = true
		k := fileKey{mode: fi.Mode(), uid: st.Uid, gid: st.Gid, size: fi.Size(), mtime: fi.ModTime().UnixNano(), link: link}
		if old, ok := before[p]; ok && old == k {
			return nil
		}
		f, err := entry(dir, p, fi, st, link)
		if err != nil {
			return err
		}
		layer = append(layer, f)
		return nil
	})
	if err != nil {
		return nil, err
	}
	for p := range before {
		if parent := path.Dir(p); seen[p] || (parent != "/" && !seen[parent]) {
			continue // still there, or its parent is gone too (the parent's whiteout covers it)
		}
		layer = append(layer, oci.File{Path: path.Join(path.Dir(p), ".wh."+path.Base(p)), Mode: 0o644})
	}
	return layer, nil
}

// readTree reads every entry under dir into a layer.
func readTree(dir string) (oci.Layer, error) {
	var layer oci.Layer
	err := walkTree(dir, func(p string, fi fs.FileInfo, st *syscall.Stat_t, link string) error {
		f, err := entry(dir, p, fi, st, link)
		if err == nil {
			layer = append(layer, f)
		}
		return err
	})
	return layer, err
}

func entry(dir, p string, fi fs.FileInfo, st *syscall.Stat_t, link string) (oci.File, error) {
	f := oci.File{Path: p, Mode: fi.Mode() & (fs.ModeDir | fs.ModeSymlink | fs.ModePerm | fs.ModeSticky | fs.ModeSetuid | fs.ModeSetgid), UID: int(st.Uid), GID: int(st.Gid), Link: link}
	if fi.Mode().IsRegular() {
		data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(p)))
		if err != nil {
			return oci.File{}, err
		}
		f.Data = data
	}
	return f, nil
}

// walkTree calls fn for each directory, regular file and symlink under dir with its image path ("/etc/x");
// devices, sockets and pipes are left out (a runtime provides /dev).
func walkTree(dir string, fn func(p string, fi fs.FileInfo, st *syscall.Stat_t, link string) error) error {
	return filepath.Walk(dir, func(full string, fi fs.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if full == dir {
			return nil
		}
		rel, err := filepath.Rel(dir, full)
		if err != nil {
			return err
		}
		p := "/" + filepath.ToSlash(rel)
		t := fi.Mode().Type()
		if t != 0 && t != fs.ModeDir && t != fs.ModeSymlink {
			return nil
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("%s: no owner information", full)
		}
		link := ""
		if t == fs.ModeSymlink {
			if link, err = os.Readlink(full); err != nil {
				return err
			}
		}
		return fn(p, fi, st, link)
	})
}

// readTarFile reads a root filesystem tarball (mmdebstrap's) into a layer.
func readTarFile(p string) (oci.Layer, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	layer, err := oci.ReadTar(f, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return layer, nil
}
