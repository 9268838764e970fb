package build

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestShellWords(t *testing.T) {
	tests := map[string]struct {
		in      string
		want    []string
		wantErr string
	}{
		"go build":      {in: `CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/x ./services/x`, want: []string{"CGO_ENABLED=0", "go", "build", "-trimpath", "-ldflags=-s -w", "-o", "/out/x", "./services/x"}},
		"single quotes": {in: `a 'b c' "d"e`, want: []string{"a", "b c", "de"}},
		"empty quoted":  {in: `a ""`, want: []string{"a", ""}},
		"pipe":          {in: `go build ./x | tee log`, wantErr: "shell syntax '|'"},
		"and":           {in: `go mod download && go build`, wantErr: "shell syntax '&'"},
		"expansion":     {in: `go build -o $OUT`, wantErr: "shell syntax '$'"},
		"unterminated":  {in: `go build "x`, wantErr: "unterminated quote"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := shellWords(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("shellWords (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSetEnv(t *testing.T) {
	got := setEnv([]string{"PATH=/bin", "A=1"}, []string{"A=2", "B=3"})
	if diff := cmp.Diff([]string{"PATH=/bin", "A=2", "B=3"}, got); diff != "" {
		t.Errorf("setEnv (-want +got):\n%s", diff)
	}
}
