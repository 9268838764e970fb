package main

import (
	"testing"

	"github.com/gpuhub/gpuhub/services/internal/start/starttest"
)

func TestRunExitCodes(t *testing.T) {
	starttest.ExitCodes(t, run, map[string]starttest.Case{
		"bad interval":      {Args: []string{"--interval=soon"}, Want: 2},
		"no failed samples": {Args: []string{"--max-failed-samples=0"}, Want: 2, WantStderr: []string{"--max-failed-samples must be at least 1"}},
		"simulated without API": {Args: []string{"--backend=simulated", "--node-name=n", "--kubeconfig=/nonexistent"}, Want: 2,
			WantStderr: []string{"kubernetes client"}},
	})
}
