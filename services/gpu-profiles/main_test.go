package main

import (
	"path/filepath"
	"testing"

	"github.com/gpuhub/gpuhub/services/internal/start/starttest"
)

func TestRunExitCodes(t *testing.T) {
	bad := starttest.WriteFile(t, "bad.yaml", "kinds:\n  gpu:\n    multiGPU: [1]\n  cpu: {hide: true}\n")
	starttest.ExitCodes(t, run, map[string]starttest.Case{
		"bad duration":             {Args: []string{"--quota-timeout=soon"}, Want: 2},
		"bad quota-on-unavailable": {Args: []string{"--quota-on-unavailable=maybe"}, Want: 2},
		"bad config": {Args: []string{"--config", bad}, Want: 1, WantStderr: []string{
			bad + ":3:16: kinds.gpu.multiGPU.0: a multi-GPU choice is 2 to 64 GPUs, found 1\n" +
				bad + ":4:8: kinds.cpu: nothing hides the CPU choice: remove hide and groups from cpu\n"}},
		"no config file": {Args: []string{"--config", filepath.Join(t.TempDir(), "missing.yaml")}, Want: 1, WantStderr: []string{"missing.yaml"}},
	})
}
