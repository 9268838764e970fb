package attribution

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"
)

const (
	uid = "8f3c2a1e-4b5d-4c6e-9f70-1a2b3c4d5e6f"
	cid = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
)

// The fixtures in testdata/cgroup/*.txt are /proc/<pid>/cgroup files as the
// kernel writes them for the runtime/driver/cgroup-version combination
// named in the file; the expected result is in the table.
func TestParseCgroupFixtures(t *testing.T) {
	cases := map[string]struct {
		want    Cgroup
		wantErr error
	}{
		"v2-systemd-containerd":         {want: Cgroup{PodUID: uid, ContainerID: cid, Runtime: RuntimeContainerd}},
		"v2-systemd-containerd-besteff": {want: Cgroup{PodUID: uid, ContainerID: cid, Runtime: RuntimeContainerd}},
		"v2-systemd-guaranteed":         {want: Cgroup{PodUID: uid, ContainerID: cid, Runtime: RuntimeContainerd}},
		"v2-systemd-crio":               {want: Cgroup{PodUID: uid, ContainerID: cid, Runtime: RuntimeCRIO}},
		"v2-systemd-docker":             {want: Cgroup{PodUID: uid, ContainerID: cid, Runtime: RuntimeDocker}},
		"v2-kind-nested":                {want: Cgroup{PodUID: uid, ContainerID: cid, Runtime: RuntimeContainerd}},
		"v2-cgroupns-relative":          {want: Cgroup{PodUID: uid, ContainerID: cid, Runtime: RuntimeContainerd}},
		"v2-cgroupfs":                   {want: Cgroup{PodUID: uid, ContainerID: cid}},
		"v2-crio-conmon":                {want: Cgroup{PodUID: uid}},
		"v1-cgroupfs-docker":            {want: Cgroup{PodUID: uid, ContainerID: cid}},
		"v1-systemd-containerd":         {want: Cgroup{PodUID: uid, ContainerID: cid, Runtime: RuntimeContainerd}},
		"v1-systemd-crio":               {want: Cgroup{PodUID: uid, ContainerID: cid, Runtime: RuntimeCRIO}},
		"v1-static-pod":                 {want: Cgroup{PodUID: "6f1d0c8bd3e0a9f2c4b7e8a1d2c3b4a5", ContainerID: cid}},
		"host-process-v2":               {wantErr: ErrNotInPod},
		"host-process-v1":               {wantErr: ErrNotInPod},
		"systemd-user-session":          {wantErr: ErrNotInPod},
		"kubepods-qos-level-not-pod-v2": {wantErr: ErrNotInPod},
		"empty":                         {wantErr: ErrNotInPod},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", "cgroup", name+".txt"))
			if err != nil {
				t.Fatal(err)
			}
			got, err := ParseCgroup(string(b))
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("ParseCgroup error = %v, want %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ParseCgroup (-want +got):\n%s", diff)
			}
		})
	}
}

func TestResolverCgroup(t *testing.T) {
	proc := fstest.MapFS{
		"4242/cgroup": {Data: []byte("0::/kubepods.slice/kubepods-pod" + strings.ReplaceAll(uid, "-", "_") + ".slice/cri-containerd-" + cid + ".scope\n")},
		"1/cgroup":    {Data: []byte("0::/init.scope\n")},
	}
	r := NewResolver(proc)
	got, err := r.Cgroup(4242)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(Cgroup{PodUID: uid, ContainerID: cid, Runtime: RuntimeContainerd}, got); diff != "" {
		t.Errorf("Cgroup(4242) (-want +got):\n%s", diff)
	}
	if _, err := r.Cgroup(1); !errors.Is(err, ErrNotInPod) {
		t.Errorf("Cgroup(1) error = %v, want ErrNotInPod", err)
	}
	if _, err := r.Cgroup(7); err == nil {
		t.Error("Cgroup(7) of a missing process: want an error")
	}
}

func FuzzParseCgroup(f *testing.F) {
	entries, err := os.ReadDir(filepath.Join("testdata", "cgroup"))
	if err != nil {
		f.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("testdata", "cgroup", e.Name()))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b))
	}
	f.Fuzz(func(t *testing.T, s string) {
		cg, err := ParseCgroup(s)
		if err != nil {
			if cg != (Cgroup{}) {
				t.Fatalf("error %v with a non-zero result %+v", err, cg)
			}
			return
		}
		if _, ok := normalizeUID(cg.PodUID); !ok {
			t.Fatalf("pod UID %q is not a UID", cg.PodUID)
		}
		if cg.ContainerID != "" && !isContainerID(cg.ContainerID) {
			t.Fatalf("container ID %q is not 64 hex digits", cg.ContainerID)
		}
	})
}
