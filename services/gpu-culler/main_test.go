package main

import (
	"testing"

	"github.com/gpuhub/gpuhub/services/internal/start/starttest"
)

// A policy that does not load keeps the culler from starting, with every error at its place; so does none.
func TestPolicyRefusedAtStart(t *testing.T) {
	bad := starttest.WriteFile(t, "policy.yaml", "gpu:\n  idlePeriod: 10\n  warm: 5m\n")
	starttest.ExitCodes(t, run, map[string]starttest.Case{
		"no policy":  {Args: []string{"--usage-url=http://127.0.0.1:1/"}, Want: 2, WantStderr: []string{"--policy is required"}},
		"bad policy": {Args: []string{"--policy=" + bad}, Want: 1, WantStderr: []string{"the policy does not load", bad + ":2:", bad + ":3:3:"}},
	})
}
