package policycmd

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gpuhub/gpuhub/services/internal/golden"
)

func runCmd(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Run(context.Background(), args, Env{Stdout: &out, Stderr: &errOut,
		Getenv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	return code, out.String(), errOut.String()
}

func TestCheck(t *testing.T) {
	code, out, _ := runCmd(t, nil, "check", "testdata/campus.yaml", "testdata/bad.yaml", "testdata/culler.yaml",
		"testdata/culler-bad.yaml", "testdata/unknown-kind.yaml")
	if code != 1 {
		t.Errorf("exit %d, want 1 (a bad file)", code)
	}
	golden.Check(t, "check.golden", out)
	tests := map[string]struct {
		args     []string
		wantCode int
		wantOut  string
	}{
		"quota":                 {[]string{"testdata/campus.yaml"}, 0, "testdata/campus.yaml: ok (gpu-quota policy, told by its keys)\n"},
		"culler":                {[]string{"testdata/culler.yaml"}, 0, "testdata/culler.yaml: ok (gpu-culler policy, told by its keys)\n"},
		"quota demo":            {[]string{"../../../../e2e/hub/quota-demo.yaml"}, 0, "../../../../e2e/hub/quota-demo.yaml: ok (gpu-quota policy, told by its keys)\n"},
		"culler demo":           {[]string{"../../../../e2e/hub/culler-demo.yaml"}, 0, "../../../../e2e/hub/culler-demo.yaml: ok (gpu-culler policy, told by its keys)\n"},
		"--kind culler":         {[]string{"--kind", "culler", "testdata/culler.yaml"}, 0, "testdata/culler.yaml: ok (gpu-culler policy, --kind culler)\n"},
		"--kind after the file": {[]string{"testdata/culler.yaml", "--kind=culler"}, 0, "testdata/culler.yaml: ok (gpu-culler policy, --kind culler)\n"},
		"--kind the other one": {[]string{"--kind", "quota", "testdata/culler.yaml"}, 1,
			"testdata/culler.yaml:1:1: unknown key \"every\""},
		"--kind for an unclear file": {[]string{"--kind", "quota", "testdata/unknown-kind.yaml"}, 1,
			"testdata/unknown-kind.yaml: 1 error (gpu-quota policy, --kind quota)\n"},
		"missing file": {[]string{"testdata/nothing.yaml"}, 1, "testdata/nothing.yaml: read policy: open testdata/nothing.yaml"},
		"not YAML":     {[]string{"testdata/not-yaml.yaml"}, 1, "testdata/not-yaml.yaml:2:1: YAML syntax"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			code, out, errOut := runCmd(t, nil, append([]string{"check"}, tc.args...)...)
			if code != tc.wantCode || !strings.Contains(out, tc.wantOut) {
				t.Errorf("exit %d (want %d), stdout:\n%s\nstderr:\n%s\nwant stdout to contain %q", code, tc.wantCode, out, errOut, tc.wantOut)
			}
		})
	}
	for name, args := range map[string][]string{
		"no file":      {"check"},
		"only --kind":  {"check", "--kind", "quota"},
		"unknown kind": {"check", "--kind", "cull", "testdata/culler.yaml"},
	} {
		if code, _, errOut := runCmd(t, nil, args...); code != 2 || errOut == "" {
			t.Errorf("%s: exit %d, stderr %q; want 2 with a usage message", name, code, errOut)
		}
	}
}

func TestExplainOffline(t *testing.T) {
	// Flags before or after the user, as people type them.
	code, out, errOut := runCmd(t, nil, "explain", "bob", "--groups", "students,researchers", "--policy", "testdata/campus.yaml")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	golden.Check(t, "explain-bob.golden", out)
	code, out2, _ := runCmd(t, nil, "explain", "--policy=testdata/campus.yaml", "--groups=students,researchers", "bob")
	if code != 0 || out2 != out {
		t.Errorf("flags first: exit %d, output differs:\n%s", code, out2)
	}
	for name, args := range map[string][]string{
		"no user":         {"explain", "--policy", "testdata/campus.yaml"},
		"two users":       {"explain", "bob", "carol", "--policy", "testdata/campus.yaml"},
		"neither source":  {"explain", "bob"},
		"both sources":    {"explain", "bob", "--policy", "testdata/campus.yaml", "--quota-url", "http://127.0.0.1:1/"},
		"unknown flag":    {"explain", "bob", "--polcy", "x"},
		"unknown command": {"explian", "bob"},
	} {
		if code, _, errOut := runCmd(t, nil, args...); code != 2 || errOut == "" {
			t.Errorf("%s: exit %d, stderr %q; want 2 with a usage message", name, code, errOut)
		}
	}
	code, _, errOut = runCmd(t, nil, "explain", "bob", "--policy", "testdata/bad.yaml")
	if code != 1 || !strings.Contains(errOut, "testdata/bad.yaml:2:3:") {
		t.Errorf("bad file: exit %d, %q", code, errOut)
	}
}

func TestExplainOnline(t *testing.T) {
	var gotQuery, gotAuth string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotQuery, gotAuth = r.URL.RawQuery, r.Header.Get("Authorization")
		switch {
		case r.URL.Path != "/services/gpu-quota/api/v1/explain":
			http.NotFound(w, r)
		case gotAuth == "token user-token":
			w.WriteHeader(http.StatusForbidden)
			_ = json.NewEncoder(w).Encode(map[string]any{"status": 403, "message": "only Hub admins may read another user's effective policy"})
		default:
			_ = json.NewEncoder(w).Encode(map[string]any{"user": "bob", "groups": []string{"students"}, "text": "Quota policy for user bob\n"})
		}
	}))
	defer srv.Close()
	url := srv.URL + "/services/gpu-quota"
	admin := map[string]string{"JUPYTERHUB_API_TOKEN": "admin-token"}
	code, out, errOut := runCmd(t, admin, "explain", "bob", "--quota-url", url)
	if code != 0 || out != "Quota policy for user bob\n" || gotQuery != "user=bob" || gotAuth != "token admin-token" {
		t.Errorf("exit %d, out %q, err %q, query %q, auth %q", code, out, errOut, gotQuery, gotAuth)
	}
	runCmd(t, admin, "explain", "bob", "--groups", "", "--quota-url", url)
	if gotQuery != "groups=&user=bob" {
		t.Errorf("--groups '' (no groups) asked %q", gotQuery)
	}
	env := map[string]string{"JUPYTERHUB_API_TOKEN": "admin-token", "GPUHUB_QUOTA_URL": url}
	if code, out, _ := runCmd(t, env, "explain", "bob"); code != 0 || out == "" {
		t.Errorf("GPUHUB_QUOTA_URL: exit %d", code)
	}
	code, _, errOut = runCmd(t, map[string]string{"JUPYTERHUB_API_TOKEN": "user-token"}, "explain", "bob", "--quota-url", url)
	if code != 1 || !strings.Contains(errOut, "only Hub admins") {
		t.Errorf("a user's token: exit %d, %q", code, errOut)
	}
	code, _, errOut = runCmd(t, nil, "explain", "bob", "--quota-url", url)
	if code != 1 || !strings.Contains(errOut, "JUPYTERHUB_API_TOKEN") {
		t.Errorf("no token: exit %d, %q", code, errOut)
	}
	code, _, errOut = runCmd(t, admin, "explain", "bob", "--quota-url", srv.URL+"/wrong/")
	if code != 1 || !strings.Contains(errOut, "404") {
		t.Errorf("wrong URL: exit %d, %q", code, errOut)
	}
}
