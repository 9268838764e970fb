package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	tests := map[string]struct {
		args     []string
		wantCode int
		wantOut  string // in stdout or stderr
	}{
		"no command":      {nil, 2, "usage: gpuhub COMMAND"},
		"help":            {[]string{"help"}, 0, "policy check [--kind quota|culler] FILE"},
		"unknown":         {[]string{"polcy"}, 2, `unknown command "polcy"`},
		"policy check ok": {[]string{"policy", "check", "../policycmd/testdata/campus.yaml"}, 0, "campus.yaml: ok"},
		"policy check bad": {[]string{"policy", "check", "../policycmd/testdata/bad.yaml"}, 1,
			`bad.yaml:2:3: default: unknown key "maxGPU"`},
		"policy check culler": {[]string{"policy", "check", "../../../../e2e/hub/culler-demo.yaml"}, 0,
			"culler-demo.yaml: ok (gpu-culler policy, told by its keys)"},
		"report without a URL": {[]string{"report"}, 2, "give --usage-url URL (or set GPUHUB_USAGE_URL)"},
		"policy explain": {[]string{"policy", "explain", "bob", "--policy", "../policycmd/testdata/campus.yaml"}, 0,
			"Quota policy for user bob"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := Run(context.Background(), tc.args, Env{Stdout: &out, Stderr: &errOut,
				Getenv: func(string) (string, bool) { return "", false }})
			if code != tc.wantCode || !strings.Contains(out.String()+errOut.String(), tc.wantOut) {
				t.Errorf("exit %d (want %d), output:\n%s%s\nwant it to contain %q", code, tc.wantCode, out.String(), errOut.String(), tc.wantOut)
			}
		})
	}
}
