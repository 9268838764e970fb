package benchkit

import (
	"context"
	"fmt"
	"path/filepath"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gpuhub/gpuhub/e2e/cluster"
)

// StartControlPlane starts etcd, kube-apiserver (TLS, RBAC), kube-scheduler and kube-controller-manager from
// binDir and etcd, with their state under dir/cluster, and returns a client of it that may send qps requests a
// second: seeding thousands of objects must not wait on client-go's default limit of 5. The caller stops the
// control plane. It is e2e's harness (e2e/cluster), which the benchmarks share with the e2e tests.
func StartControlPlane(ctx context.Context, binDir, etcd, dir string, qps int) (*cluster.ControlPlane, *kubernetes.Clientset, error) {
	cp, err := cluster.Start(ctx, cluster.Options{BinDir: binDir, Etcd: etcd, Dir: filepath.Join(dir, "cluster")})
	if err != nil {
		return nil, nil, err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", cp.Kubeconfig)
	if err != nil {
		cp.Stop()
		return nil, nil, fmt.Errorf("control plane kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = float32(qps), qps
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		cp.Stop()
		return nil, nil, fmt.Errorf("control plane client: %w", err)
	}
	return cp, kc, nil
}

// FreePorts returns n distinct free loopback ports for the processes a benchmark starts (e2e/cluster's, so
// that this file is the benchmarks' one tie to e2e/); it panics when none are left.
func FreePorts(n int) []int { return cluster.FreePorts(n) }
