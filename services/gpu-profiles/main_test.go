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
	if err := os.WriteFile(bad, []byte("kinds:\n  gpu:\n    multiGPU: [1]\n  cpu: {hide: true}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		args       []string
		want       int
		wantStderr string
	}{
		"help":                     {args: []string{"--help"}, want: 0},
		"unknown flag":             {args: []string{"--no-such-flag"}, want: 2},
		"bad duration":             {args: []string{"--quota-timeout=soon"}, want: 2},
		"bad log format":           {args: []string{"--log-format=xml"}, want: 2},
		"bad quota-on-unavailable": {args: []string{"--quota-on-unavailable=maybe"}, want: 2},
		"bad config": {args: []string{"--config", bad}, want: 1,
			wantStderr: bad + ":3:16: kinds.gpu.multiGPU.0: a multi-GPU choice is 2 to 64 GPUs, found 1\n" +
				bad + ":4:8: kinds.cpu: nothing hides the CPU choice: remove hide and groups from cpu\n"},
		"no config file": {args: []string{"--config", filepath.Join(dir, "missing.yaml")}, want: 1, wantStderr: "missing.yaml"},
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
