package main

import (
	"path/filepath"
	"testing"

	"github.com/gpuhub/gpuhub/services/internal/start/starttest"
)

func TestRunExitCodes(t *testing.T) {
	bad := starttest.WriteFile(t, "bad.yaml", "default:\n  maxGPUs: lots\n  maxServer: 1\n")
	good := starttest.WriteFile(t, "good.yaml", "default: {}\n")
	starttest.ExitCodes(t, run, map[string]starttest.Case{
		"bad duration": {Args: []string{"--usage-refresh=soon"}, Want: 2},
		"bad policy": {Args: []string{"--policy", bad}, Want: 1, WantStderr: []string{
			bad + ":2:12: default.maxGPUs: expected a number, a fraction such as 3/7, or unlimited; found \"lots\"\n" +
				bad + ":3:3: default: unknown key \"maxServer\" (did you mean \"maxServers\"?)\n"}},
		"bad tolerations": {Args: []string{"--policy", good, "--tolerations", `[{"key":"team","operator":"In"}]`}, Want: 2,
			WantStderr: []string{`gpu-quota: --tolerations: tolerations[0].operator: operator is Equal or Exists, found "In"`}},
		"no policy file": {Args: []string{"--policy", filepath.Join(t.TempDir(), "missing.yaml")}, Want: 1, WantStderr: []string{"missing.yaml"}},
	})
}
