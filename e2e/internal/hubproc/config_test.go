package hubproc

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// testHub builds a Hub with fixed secrets, ports and paths, so its config is reproducible.
func testHub(opts Options) *Hub {
	if opts.Venv == "" {
		opts.Venv = "/venv"
	}
	if opts.CHPPath == "" {
		opts.CHPPath = "/node/bin/configurable-http-proxy"
	}
	if opts.Spawner == "" {
		opts.Spawner = "simple"
	}
	if opts.LogLevel == "" {
		opts.LogLevel = "INFO"
	}
	if opts.Password == "" {
		opts.Password = "pw"
	}
	h := newHub(opts)
	h.workDir, h.marker, h.ports, h.asRoot = "/work", "marker", [3]int{8000, 8001, 8081}, true
	n := 0
	h.newSecret = func() string { n++; return fmt.Sprintf("secret-%d", n) }
	return h
}

func TestRenderConfigGolden(t *testing.T) {
	tests := map[string]Options{
		"minimal": {},
		"full": {
			Users:  []string{"alice", "bob"},
			Admins: []string{"root-user"},
			Groups: map[string][]string{"gpu-team": {"alice"}, "empty": nil},
			Services: []Service{
				{Name: "gpu-usage", Token: "usage-token", URL: "http://127.0.0.1:9000", Scopes: []string{"list:users", "read:users"}},
				{Name: "watcher", Roles: []string{"viewers", "admin"}},
			},
			Roles:          []Role{{Name: "viewers", Description: "read groups", Scopes: []string{"read:groups"}, Users: []string{"bob"}}},
			SingleUserArgs: []string{"--debug"},
			// A quote and a newline must stay inside their literal.
			Password:    "p\"w\n'x",
			ExtraConfig: "c.JupyterHub.active_server_limit = 3",
		},
		"kubespawner": {Spawner: "kubespawner.KubeSpawner", ExtraConfig: "c.KubeSpawner.namespace = 'jhub'"},
	}
	for name, opts := range tests {
		t.Run(name, func(t *testing.T) {
			h := testHub(opts)
			data, err := h.configData()
			if err != nil {
				t.Fatal(err)
			}
			got, err := renderConfig(data)
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", name+".golden.py")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if diff := cmp.Diff(string(want), string(got)); diff != "" {
				t.Errorf("jupyterhub_config.py mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestConfigDataTokens(t *testing.T) {
	h := testHub(Options{Services: []Service{{Name: "a", Token: "given-token"}, {Name: "b"}}})
	if _, err := h.configData(); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{"admin": h.AdminToken(), "a": h.ServiceToken("a"), "b": h.ServiceToken("b")}
	want := map[string]string{"admin": "secret-1", "a": "given-token", "b": "secret-2"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("tokens (-want +got):\n%s", diff)
	}
}

func TestConfigDataErrors(t *testing.T) {
	tests := map[string]struct {
		services []Service
		wantErr  string
	}{
		"short token":   {services: []Service{{Name: "a", Token: "short"}}, wantErr: "at least 8 characters"},
		"duplicate":     {services: []Service{{Name: "a"}, {Name: "a"}}, wantErr: "duplicate service"},
		"reserved name": {services: []Service{{Name: AdminService}}, wantErr: "invalid service name"},
		"empty name":    {services: []Service{{}}, wantErr: "invalid service name"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := testHub(Options{Services: tc.services}).configData()
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("configData() error = %v, want it to contain %q", err, tc.wantErr)
			}
		})
	}
}

func TestPyLiteral(t *testing.T) {
	tests := map[string]struct {
		in      any
		want    string
		wantErr bool
	}{
		"string":       {in: `a"b\c`, want: `"a\"b\\c"`},
		"list":         {in: []string{"x", "y"}, want: `["x","y"]`},
		"nil list":     {in: []string(nil), wantErr: true},
		"nested nil":   {in: map[string][]string{"g": nil}, wantErr: true},
		"bool":         {in: true, wantErr: true},
		"html escaped": {in: "<&>", want: `"\u003c\u0026\u003e"`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := pyLiteral(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("pyLiteral(%#v) error = %v, wantErr %v", tc.in, err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("pyLiteral(%#v) (-want +got):\n%s", tc.in, diff)
			}
		})
	}
}

func TestStartWithoutVenv(t *testing.T) {
	t.Setenv(EnvVenv, "")
	t.Setenv(EnvCHP, "")
	_, err := prepare(t.Context(), Options{})
	if err == nil || !strings.Contains(err.Error(), EnvVenv) || !strings.Contains(err.Error(), "make") {
		t.Errorf("prepare() error = %v, want one naming %s and the make target", err, EnvVenv)
	}
}
