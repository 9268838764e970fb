package emulator

import (
	"fmt"
	"net"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
)

var testPrograms = []Program{
	{Name: "jupyterhub-singleuser", Aliases: []string{"start-singleuser.sh"}, Path: "/venv/bin/jupyterhub-singleuser", Kind: Singleuser},
	{Name: "gpu-agent", Path: "/repo/bin/gpu-agent", Kind: Service},
	{Name: "usage-api", Kind: Service}, // allowed, but not built
}

func TestResolve(t *testing.T) {
	tests := map[string]struct {
		c        corev1.Container
		wantPath string
		wantArgs []string
		wantErr  bool
	}{
		"kubespawner args": {
			c:        corev1.Container{Name: "notebook", Image: "quay.io/jupyterhub/k8s-singleuser-sample:4.3.2", Args: []string{"jupyterhub-singleuser", "--debug"}},
			wantPath: "/venv/bin/jupyterhub-singleuser", wantArgs: []string{"--debug"},
		},
		"docker-stacks alias": {
			c:        corev1.Container{Name: "notebook", Image: "jupyter/base", Command: []string{"start-singleuser.sh"}},
			wantPath: "/venv/bin/jupyterhub-singleuser",
		},
		"agent by image, positional args dropped": {
			c:        corev1.Container{Name: "agent", Image: "ghcr.io/gpuhub/gpu-agent:v1@sha256:abc", Args: []string{"--listen=:9400", "-v", "extra"}},
			wantPath: "/repo/bin/gpu-agent", wantArgs: []string{"--listen=:9400", "-v"},
		},
		"agent by command path": {
			c:        corev1.Container{Name: "agent", Image: "x", Command: []string{"/usr/local/bin/gpu-agent"}, Args: []string{"--backend=simulated"}},
			wantPath: "/repo/bin/gpu-agent", wantArgs: []string{"--backend=simulated"},
		},
		"shell refused":                   {c: corev1.Container{Name: "sh", Image: "busybox", Command: []string{"/bin/sh", "-c", "jupyterhub-singleuser"}}, wantErr: true},
		"image name is not enough for sh": {c: corev1.Container{Name: "x", Image: "gpu-agent", Command: []string{"bash"}}, wantErr: true},
		"allowed but not built":           {c: corev1.Container{Name: "u", Image: "usage-api"}, wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			inv, err := resolve(tc.c, testPrograms)
			if (err != nil) != tc.wantErr {
				t.Fatalf("resolve err = %v, wantErr %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if diff := cmp.Diff(tc.wantPath, inv.program.Path); diff != "" {
				t.Errorf("path (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantArgs, inv.args); diff != "" {
				t.Errorf("args (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBindArgs(t *testing.T) {
	tests := map[string]struct {
		inv  invocation
		port int32
		want []string
	}{
		"singleuser ip and port replaced": {
			inv:  invocation{program: testPrograms[0], args: []string{"--ip=0.0.0.0", "--port=9999", "--debug"}},
			port: 8888, want: []string{"--debug", "--ip=127.10.1.7", "--port=8888"},
		},
		"service listen host replaced": {
			inv:  invocation{program: testPrograms[1], args: []string{"--listen=:9400"}},
			port: 9400, want: []string{"--listen=127.10.1.7:9400"},
		},
		"service listen added": {
			inv:  invocation{program: testPrograms[1]},
			port: 9400, want: []string{"--listen=127.10.1.7:9400"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, bindArgs(tc.inv, "127.10.1.7", tc.port)); diff != "" {
				t.Errorf("args (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEnvAllowed(t *testing.T) {
	for name, want := range map[string]bool{
		"JUPYTERHUB_API_TOKEN": true, "MEM_LIMIT": true, "LD_PRELOAD": false, "PATH": false,
		"PYTHONPATH": false, "GPUHUB_SIM_POD_UID": false, "HOME": false,
	} {
		if got := envAllowed(name); got != want {
			t.Errorf("envAllowed(%s) = %v, want %v", name, got, want)
		}
	}
}

func TestIPAMUniqueLoopback(t *testing.T) {
	a := newIPAM(10, 2)
	seen := map[string]bool{}
	for range 253 {
		ip, err := a.allocate(1)
		if err != nil {
			t.Fatal(err)
		}
		if seen[ip] {
			t.Fatalf("ip %s handed out twice", ip)
		}
		seen[ip] = true
	}
	if _, err := a.allocate(1); err == nil {
		t.Fatal("254th address on one node, want an error")
	}
	a.release("127.10.2.9")
	ip, err := a.allocate(1)
	if err != nil || ip != "127.10.2.9" {
		t.Fatalf("after release got %q, %v; want 127.10.2.9", ip, err)
	}
}

// TestFreeBlock: the address block is picked among those no listening socket uses; a socket bound in a
// block (another stack's pod) keeps the next emulator out of it.
func TestFreeBlock(t *testing.T) {
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.77.1.2:0")
	if err != nil {
		t.Skipf("cannot bind 127.77.1.2: %v", err)
	}
	defer ln.Close()
	for range 200 {
		if b := freeBlock(); b < 10 || b >= 250 || b == 77 {
			t.Fatalf("freeBlock() = %d, want 10-249 and not 77 (bound)", b)
		}
	}
}

// TestTopologyFile checks the shipped topology: the node kinds the issue asks for, with the
// resources a GPU Operator node of that kind has.
func TestTopologyFile(t *testing.T) {
	topo, err := LoadTopology("../topology.yaml")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]string{}
	for _, n := range topo.Nodes {
		_, alloc, err := n.capacity()
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]string{}
		for _, r := range []corev1.ResourceName{"nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-3g.20gb", "nvidia.com/mig-1g.5gb"} {
			if q, ok := alloc[r]; ok {
				m[string(r)] = q.String()
			}
		}
		m["product"] = n.Labels["nvidia.com/gpu.product"]
		m["strategy"] = n.Labels["nvidia.com/mig.strategy"] + "/" + n.Labels["nvidia.com/gpu.sharing-strategy"]
		got[n.Name] = m
	}
	want := map[string]map[string]string{
		"gpu-a100-0": {"nvidia.com/gpu": "0", "nvidia.com/mig-3g.20gb": "2", "nvidia.com/mig-1g.5gb": "8",
			"product": "NVIDIA-A100-SXM4-40GB", "strategy": "mixed/none"},
		"gpu-h100-0": {"nvidia.com/gpu": "2", "product": "NVIDIA-H100-80GB-HBM3", "strategy": "single/none"},
		"gpu-t4-0":   {"nvidia.com/gpu": "0", "nvidia.com/gpu.shared": "4", "product": "Tesla-T4-SHARED", "strategy": "/time-slicing"},
		"cpu-0":      {"product": "", "strategy": "/"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("topology (-want +got):\n%s", diff)
	}
	// MIG slices must fit the GPUs: 7 compute slices per A100.
	for _, n := range topo.Nodes {
		for _, g := range n.GPUs {
			slices := 0
			for _, m := range g.MIG {
				slices += int(m.Profile[0] - '0')
			}
			if slices > 7 {
				t.Errorf("%s %s: MIG layout uses %d compute slices, an A100 has 7", n.Name, g.UUID, slices)
			}
		}
	}
}

func TestParseTopologyErrors(t *testing.T) {
	tests := map[string]string{
		"unknown field": "nodes:\n- name: a\n  gpuz: []\n",
		"no nodes":      "nodes: []\n",
		"duplicate":     "nodes:\n- name: a\n- name: a\n",
		"bad quantity":  "nodes:\n- name: a\n  resources: {cpu: lots}\n",
		"reserved only": "nodes:\n- name: a\n  reserved: {cpu: '1'}\n",
	}
	for name, doc := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := ParseTopology([]byte(doc)); err == nil {
				t.Errorf("ParseTopology accepted %q", doc)
			}
		})
	}
}

// TestSecondTopologyFile checks e2e/topology-2.yaml: kinds that e2e/topology.yaml lacks (four whole L40S on one
// node, an A10 shared by MPS), so the spawn form test can show the profiles follow the cluster.
func TestSecondTopologyFile(t *testing.T) {
	topo, err := LoadTopology("../topology-2.yaml")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, n := range topo.Nodes {
		_, alloc, err := n.capacity()
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range []corev1.ResourceName{"nvidia.com/gpu", "nvidia.com/gpu.shared"} {
			if q, ok := alloc[r]; ok && !q.IsZero() {
				got[n.Name] = fmt.Sprintf("%s=%s %s %s", r, q.String(), n.Labels["nvidia.com/gpu.product"], n.Labels["nvidia.com/gpu.sharing-strategy"])
			}
		}
	}
	want := map[string]string{
		"gpu-l40s-0":    "nvidia.com/gpu=4 NVIDIA-L40S none",
		"gpu-a10-mps-0": "nvidia.com/gpu.shared=2 NVIDIA-A10-SHARED mps",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("topology-2 GPU nodes (-want +got):\n%s", diff)
	}
}
