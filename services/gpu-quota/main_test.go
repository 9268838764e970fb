package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRunExitCodes(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("default:\n  maxGPUs: lots\n  maxServer: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		args       []string
		want       int
		wantStderr string
	}{
		"help":           {args: []string{"--help"}, want: 0},
		"unknown flag":   {args: []string{"--no-such-flag"}, want: 2},
		"bad duration":   {args: []string{"--usage-refresh=soon"}, want: 2},
		"bad log format": {args: []string{"--log-format=xml"}, want: 2},
		"bad policy": {args: []string{"--policy", bad}, want: 1,
			wantStderr: bad + ":2:12: default.maxGPUs: expected a number, a fraction such as 3/7, or unlimited; found \"lots\"\n" +
				bad + ":3:3: default: unknown key \"maxServer\" (did you mean \"maxServers\"?)\n"},
		"no policy file": {args: []string{"--policy", filepath.Join(dir, "missing.yaml")}, want: 1, wantStderr: "missing.yaml"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var stderr bytes.Buffer
			if got := run(tc.args, &stderr); got != tc.want {
				t.Errorf("run(%q) = %d, want %d\n%s", tc.args, got, tc.want, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.wantStderr) {
				t.Errorf("stderr:\n%s\nwant it to contain:\n%s", stderr.String(), tc.wantStderr)
			}
		})
	}
}
