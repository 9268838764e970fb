package main

import (
	"io"
	"testing"
)

func TestRunExitCodes(t *testing.T) {
	cases := map[string]struct {
		args []string
		want int
	}{
		"help":                  {args: []string{"--help"}, want: 0},
		"unknown flag":          {args: []string{"--no-such-flag"}, want: 2},
		"bad interval":          {args: []string{"--interval=soon"}, want: 2},
		"bad log format":        {args: []string{"--log-format=xml"}, want: 2},
		"no failed samples":     {args: []string{"--max-failed-samples=0"}, want: 2},
		"simulated without API": {args: []string{"--backend=simulated", "--node-name=n", "--kubeconfig=/nonexistent"}, want: 2},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := run(tc.args, io.Discard); got != tc.want {
				t.Errorf("run(%q) = %d, want %d", tc.args, got, tc.want)
			}
		})
	}
}
