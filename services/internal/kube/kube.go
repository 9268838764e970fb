// Package kube builds Kubernetes clients the same way for every gpuhub program.
package kube

import (
	"fmt"
	"os"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Options tune the client. QPS and Burst default to values that suit informer-based services.
type Options struct {
	// Kubeconfig is a path; empty means in-cluster config, falling back to $KUBECONFIG / ~/.kube/config.
	Kubeconfig string
	UserAgent  string
	QPS        float32
	Burst      int
}

// RESTConfig resolves the connection settings.
func RESTConfig(opts Options) (*rest.Config, error) {
	var (
		cfg *rest.Config
		err error
	)
	switch {
	case opts.Kubeconfig != "":
		cfg, err = clientcmd.BuildConfigFromFlags("", opts.Kubeconfig)
	case os.Getenv("KUBERNETES_SERVICE_HOST") != "":
		cfg, err = rest.InClusterConfig()
	default:
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes config (set --kubeconfig or run in a cluster): %w", err)
	}
	cfg.QPS, cfg.Burst = 20, 40
	if opts.QPS > 0 {
		cfg.QPS = opts.QPS
	}
	if opts.Burst > 0 {
		cfg.Burst = opts.Burst
	}
	if opts.UserAgent != "" {
		cfg.UserAgent = opts.UserAgent
	}
	return cfg, nil
}

// NewClient returns a typed clientset.
func NewClient(opts Options) (kubernetes.Interface, error) {
	cfg, err := RESTConfig(opts)
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return cs, nil
}
