package logscan

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const (
	adminToken = "0123456789abcdef0123456789abcdef0123456789abcdef"
	userToken  = "fedcba9876543210fedcba9876543210"
	saToken    = "eyJhbGciOiJSUzI1NiJ9.eyJhdWQiOlsiZ3B1aHViLWFnZW50Il19.c2lnbmF0dXJl"
)

func registry() *Registry {
	r := &Registry{}
	r.Register("Hub admin token", adminToken)
	r.Register("alice's Hub token", userToken)
	r.Register("ServiceAccount token of gpuhub-usage", saToken)
	r.Register("too short to mean anything", "alice")
	return r
}

func TestScanReader(t *testing.T) {
	cases := map[string]struct {
		log  string
		want []Finding
	}{
		"clean": {
			log: "time=... level=INFO msg=\"hub api\" token=<redacted>\n" +
				"[I 2026-11-22 10:00:00 JupyterHub log:192] 200 GET /hub/api/user?token=[secret] (alice@127.0.0.1)\n" +
				"Authorization: token <redacted>\nalice logged in\n",
		},
		"registered secrets, named by what they are": {
			log: "line one\nsent " + adminToken + "\nok\n" + `{"kubeconfig":"` + saToken + `"}` + "\n" + userToken + userToken + "\n",
			want: []Finding{
				{File: "x.log", Line: 2, What: "Hub admin token"},
				{File: "x.log", Line: 4, What: "ServiceAccount token of gpuhub-usage"},
				{File: "x.log", Line: 5, What: "alice's Hub token"},
			},
		},
		"tokens nobody registered": {
			log: "GET /hub/api/users Authorization: token 9f8e7d6c5b4a39281706f5e4d3c2b1a0\n" +
				`headers={"Authorization": "Bearer abcdefghijklmnopqrstuvwxyz012345"}` + "\n" +
				"GET /user/bob/api/kernels?token=6f5e4d3c2b1a09f8e7d6c5b4a3928170&x=1\n" +
				"env JUPYTERHUB_API_TOKEN=6f5e4d3c2b1a09f8e7d6c5b4a3928170\n" +
				"short: Authorization: token abc\n",
			want: []Finding{
				{File: "x.log", Line: 1, What: "an Authorization header with a token"},
				{File: "x.log", Line: 2, What: "an Authorization header with a token"},
				{File: "x.log", Line: 3, What: "a token query parameter"},
				{File: "x.log", Line: 4, What: "JUPYTERHUB_API_TOKEN with its value"},
			},
		},
		"no newline at the end": {
			log:  "a\n" + adminToken,
			want: []Finding{{File: "x.log", Line: 2, What: "Hub admin token"}},
		},
		"a secret cut by the read buffer in a long line": {
			log:  strings.Repeat("x", 64<<10-10) + adminToken + strings.Repeat("y", 200<<10) + "\nnext\n",
			want: []Finding{{File: "x.log", Line: 1, What: "Hub admin token"}},
		},
		"line numbers after a long line": {
			log:  strings.Repeat("x", 300<<10) + "\nnext\n" + userToken + "\n",
			want: []Finding{{File: "x.log", Line: 3, What: "alice's Hub token"}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := registry().ScanReader("x.log", strings.NewReader(tc.log))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("findings (-want +got):\n%s", diff)
			}
		})
	}
}

func TestScanDirOnlyLogs(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"logs/usage-api.log":       "ok\n" + adminToken + "\n",
		"hub/jupyterhub.log":       "fine\n",
		"nodes/logs/jhub_pod_c":    "Authorization: Bearer " + saToken + "\n",
		"hub/jupyterhub_config.py": "c.JupyterHub.services = [{'api_token': '" + adminToken + "'}]\n", // config, not a log
		"nodes/kubeconfig":         "token: " + saToken + "\n",
	}
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	got, err := registry().ScanDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []Finding{
		{File: filepath.Join(dir, "logs/usage-api.log"), Line: 2, What: "Hub admin token"},
		{File: filepath.Join(dir, "nodes/logs/jhub_pod_c"), Line: 1, What: "ServiceAccount token of gpuhub-usage"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("findings (-want +got):\n%s", diff)
	}
	report := Report(got)
	for _, s := range []string{adminToken, saToken} {
		if strings.Contains(report, s) {
			t.Fatalf("the report prints a secret:\n%s", report)
		}
	}
	if !strings.Contains(report, "logs/usage-api.log:2: Hub admin token") {
		t.Errorf("report does not name file and line:\n%s", report)
	}
}

func TestRegisterIgnoresShortAndRenames(t *testing.T) {
	r := registry()
	r.Register("Hub token of service gpu-usage", adminToken)
	r.Register("blank", "   ")
	if got := r.Len(); got != 3 {
		t.Errorf("Len = %d, want 3", got)
	}
	got, _ := r.ScanReader("x", strings.NewReader(adminToken))
	if len(got) != 1 || got[0].What != "Hub token of service gpu-usage" {
		t.Errorf("the later registration names the secret: %v", got)
	}
}

func TestCheck(t *testing.T) {
	dir := t.TempDir()
	if sum, err := registry().CheckDir(dir); err != nil || sum != (Summary{Secrets: 3}) {
		t.Errorf("CheckDir(empty) = %+v, %v; want no files, 3 secrets, no error", sum, err)
	}
	if err := registry().CheckFile(filepath.Join(dir, "missing.log")); err != nil {
		t.Errorf("CheckFile(missing) = %v, want nil: nothing was logged", err)
	}
	p := filepath.Join(dir, "hub.log")
	if err := os.WriteFile(p, []byte("x\nAuthorization: token "+userToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := registry().CheckFile(p)
	var le *LeakError
	if !errors.As(err, &le) {
		t.Fatalf("CheckFile = %v, want a *LeakError", err)
	}
	want := []Finding{{File: p, Line: 2, What: "alice's Hub token"}}
	if diff := cmp.Diff(want, le.Findings); diff != "" {
		t.Errorf("findings (-want +got):\n%s", diff)
	}
	if strings.Contains(err.Error(), userToken) {
		t.Errorf("the error prints the secret: %v", err)
	}
}
