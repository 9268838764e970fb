package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A policy that does not load keeps the culler from starting, with every error at its place; so does none.
func TestPolicyRefusedAtStart(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(bad, []byte("gpu:\n  idlePeriod: 10\n  warm: 5m\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"no policy", []string{"--usage-url=http://127.0.0.1:1/"}, 2, []string{"--policy is required"}},
		{"bad policy", []string{"--policy=" + bad}, 1, []string{"the policy does not load", bad + ":2:", bad + ":3:3:"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			if code := run(tt.args, &out); code != tt.code {
				t.Errorf("exit %d, want %d; output:\n%s", code, tt.code, out.String())
			}
			for _, w := range tt.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
		})
	}
}
