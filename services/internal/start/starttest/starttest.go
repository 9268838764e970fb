// Package starttest tests a service's main, the body of which is run(args, stderr) returning the exit code:
// how each start ends, and what it says.
package starttest

import (
	"bytes"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Case is one start of a main.
type Case struct {
	Args []string
	// Want is the exit code.
	Want int
	// WantStderr are parts of what the main writes to stderr, each of which must be there.
	WantStderr []string
}

// shared are the starts every main ends the same way, as start.Command parses them.
var shared = map[string]Case{
	"help":           {Args: []string{"--help"}, Want: 0, WantStderr: []string{"-log-format"}},
	"unknown flag":   {Args: []string{"--no-such-flag"}, Want: 2, WantStderr: []string{"no-such-flag"}},
	"bad log format": {Args: []string{"--log-format=xml"}, Want: 2, WantStderr: []string{"xml"}},
}

// ExitCodes runs run with each case's arguments, and with the arguments every main answers alike (--help, an
// unknown flag, a bad --log-format), and checks the exit code and stderr.
func ExitCodes(t *testing.T, run func(args []string, stderr io.Writer) int, cases map[string]Case) {
	t.Helper()
	all := maps.Clone(shared)
	maps.Copy(all, cases)
	for name, tc := range all {
		t.Run(name, func(t *testing.T) {
			var stderr bytes.Buffer
			if got := run(tc.Args, &stderr); got != tc.Want {
				t.Errorf("run(%q) = %d, want %d; stderr:\n%s", tc.Args, got, tc.Want, stderr.String())
			}
			for _, want := range tc.WantStderr {
				if !strings.Contains(stderr.String(), want) {
					t.Errorf("stderr:\n%s\nwant it to contain:\n%s", stderr.String(), want)
				}
			}
		})
	}
}

// WriteFile writes content to a file name in a new temporary directory and returns its path.
func WriteFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
