package start

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestCommandParse: the shared flags exist with their variables, and a main learns when to end at once.
func TestCommandParse(t *testing.T) {
	tests := map[string]struct {
		args           []string
		env            map[string]string
		wantCode       int
		wantOK         bool
		wantKubeconfig string
		wantStderr     string
	}{
		"defaults":              {wantOK: true},
		"help":                  {args: []string{"--help"}, wantCode: 0, wantStderr: "[$GPUHUB_LOG_FORMAT]"},
		"unknown flag":          {args: []string{"--no-such-flag"}, wantCode: 2, wantStderr: "no-such-flag"},
		"own flag from env":     {env: map[string]string{"GPUHUB_TEST_NAME": "x"}, wantOK: true},
		"bad own flag from env": {env: map[string]string{"GPUHUB_TEST_COUNT": "many"}, wantCode: 2, wantStderr: "GPUHUB_TEST_COUNT"},
		"kubeconfig from env":   {env: map[string]string{"KUBECONFIG": "/k"}, wantOK: true, wantKubeconfig: "/k"},
		"flag over env":         {args: []string{"--kubeconfig=/f"}, env: map[string]string{"KUBECONFIG": "/k"}, wantOK: true, wantKubeconfig: "/f"},
		"bad log format":        {args: []string{"--log-format=xml"}, wantCode: 2, wantStderr: "xml"},
		"bad log level from env": {env: map[string]string{"GPUHUB_LOG_LEVEL": "loud"}, wantCode: 2,
			wantStderr: "loud"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Setenv("KUBECONFIG", "")
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			var stderr bytes.Buffer
			cmd := NewCommand("gpu-test", &stderr)
			name := cmd.Flags.String("name", "", "a name")
			cmd.Flags.Int("count", 1, "a count")
			code, ok := cmd.Parse(tc.args, map[string]string{"name": "GPUHUB_TEST_NAME", "count": "GPUHUB_TEST_COUNT"})
			if code != tc.wantCode || ok != tc.wantOK {
				t.Fatalf("Parse = %d, %t, want %d, %t; stderr:\n%s", code, ok, tc.wantCode, tc.wantOK, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.wantStderr) {
				t.Errorf("stderr:\n%s\nwant it to contain %q", stderr.String(), tc.wantStderr)
			}
			if !ok {
				return
			}
			if cmd.Logger == nil {
				t.Error("no logger after Parse")
			}
			if diff := cmp.Diff(tc.wantKubeconfig, cmd.Kubeconfig()); diff != "" {
				t.Errorf("kubeconfig (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.env["GPUHUB_TEST_NAME"], *name); diff != "" {
				t.Errorf("name (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCommandExit(t *testing.T) {
	var stderr bytes.Buffer
	cmd := NewCommand("gpu-test", &stderr)
	if code, ok := cmd.Parse(nil, nil); !ok {
		t.Fatalf("Parse = %d: %s", code, stderr.String())
	}
	if got := cmd.Exit(nil); got != 0 {
		t.Errorf("Exit(nil) = %d, want 0", got)
	}
	if got := cmd.Exit(errors.New("boom")); got != 1 || !strings.Contains(stderr.String(), `msg="gpu-test stopped" err=boom`) {
		t.Errorf("Exit(boom) = %d, log:\n%s\nwant 1 and the error logged", got, stderr.String())
	}
}

const kubeconfig = `apiVersion: v1
kind: Config
clusters:
- {name: local, cluster: {server: "https://127.0.0.1:6443"}}
users:
- {name: sa, user: {token: not-a-real-token}}
contexts:
- {name: local, context: {cluster: local, user: sa}}
current-context: local
`

// TestClients: without the Hub's environment a Hub service does not start; a service that is none
// (WithoutHub) gets its Kubernetes client and registry and no Hub client.
func TestClients(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("JUPYTERHUB_API_URL", "")
	t.Setenv("JUPYTERHUB_API_TOKEN", "")
	var stderr bytes.Buffer
	cmd := NewCommand("gpu-test", &stderr)
	if code, ok := cmd.Parse([]string{"--kubeconfig=" + path}, nil); !ok {
		t.Fatalf("Parse = %d: %s", code, stderr.String())
	}
	if _, ok := cmd.Clients(Options{}); ok || !strings.Contains(stderr.String(), "hub client") {
		t.Errorf("Clients without the Hub's environment: ok %t, log:\n%s\nwant a refusal naming the hub client", ok, stderr.String())
	}
	cl, ok := cmd.Clients(Options{WithoutHub: true})
	if !ok {
		t.Fatalf("Clients(WithoutHub): %s", stderr.String())
	}
	if cl.Kube == nil || cl.Registry == nil || cl.Hub != nil || cl.Auth != nil {
		t.Errorf("Clients(WithoutHub) = kube %v, registry %v, hub %v, auth %v; want kube and registry only", cl.Kube != nil, cl.Registry != nil, cl.Hub != nil, cl.Auth != nil)
	}
}

func TestShutdownDelayFlag(t *testing.T) {
	tests := map[string]struct {
		args []string
		env  string
		want time.Duration
	}{
		"default: close at once": {},
		"flag":                   {args: []string{"--shutdown-delay=3s"}, want: 3 * time.Second},
		"environment":            {env: "1500ms", want: 1500 * time.Millisecond},
		"flag over environment":  {args: []string{"--shutdown-delay=2s"}, env: "9s", want: 2 * time.Second},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Setenv("GPUHUB_SHUTDOWN_DELAY", tc.env)
			var stderr bytes.Buffer
			cmd := NewCommand("gpu-test", &stderr)
			delay := cmd.ShutdownDelayFlag()
			if code, ok := cmd.Parse(tc.args, nil); !ok {
				t.Fatalf("Parse = %d; stderr:\n%s", code, stderr.String())
			}
			if diff := cmp.Diff(tc.want, *delay); diff != "" {
				t.Errorf("--shutdown-delay (-want +got):\n%s", diff)
			}
		})
	}
}
