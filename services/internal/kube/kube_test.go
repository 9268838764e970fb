package kube

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const kubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: local
  cluster: {server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}
users:
- name: sa
  user: {token: "not-a-real-token"}
contexts:
- name: local
  context: {cluster: local, user: sa}
current-context: local
`

func TestRESTConfigFromKubeconfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := RESTConfig(Options{Kubeconfig: path, UserAgent: "gpuhub-test", QPS: 50})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://127.0.0.1:6443" || cfg.UserAgent != "gpuhub-test" || cfg.QPS != 50 || cfg.Burst != 40 {
		t.Errorf("cfg = host %q ua %q qps %v burst %d", cfg.Host, cfg.UserAgent, cfg.QPS, cfg.Burst)
	}
	if _, err := NewClient(Options{Kubeconfig: path}); err != nil {
		t.Errorf("NewClient: %v", err)
	}
}

func TestRESTConfigMissingFile(t *testing.T) {
	_, err := RESTConfig(Options{Kubeconfig: filepath.Join(t.TempDir(), "absent")})
	if err == nil || !strings.Contains(err.Error(), "--kubeconfig") {
		t.Fatalf("err = %v, want a hint about --kubeconfig", err)
	}
}
