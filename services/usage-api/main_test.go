package main

import (
	"testing"

	"github.com/gpuhub/gpuhub/services/internal/start/starttest"
)

func TestRunExitCodes(t *testing.T) {
	t.Setenv("JUPYTERHUB_API_URL", "")
	t.Setenv("JUPYTERHUB_API_TOKEN", "")
	starttest.ExitCodes(t, run, map[string]starttest.Case{
		"bad interval":   {Args: []string{"--interval=soon"}, Want: 2},
		"bad port":       {Args: []string{"--agent-port=x"}, Want: 2},
		"no Hub":         {Args: []string{"--kubeconfig=/nonexistent"}, Want: 2, WantStderr: []string{"JUPYTERHUB_API_URL"}},
		"bad admin-view": {Args: []string{"--admin-view=perhaps"}, Want: 2},
	})
}
