package dockerfile

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParse(t *testing.T) {
	const text = `# syntax=docker/dockerfile:1
# Build from the repository root:
#   docker build -f images/x.Dockerfile -t ghcr.io/gpuhub/x:0.1.0 .
ARG BASE=gcr.io/distroless/static-debian12:nonroot
FROM golang:1.26-bookworm AS build
WORKDIR /src
ARG GOFLAGS=-mod=readonly
RUN CGO_ENABLED=0 go build -trimpath \
    # a comment inside a continuation is dropped
    -o /out/x ./services/x

FROM ${BASE}
ARG PORT=8080
ENV A=1 B="two words"
ENV C 3
COPY --from=build --chown=65532:65532 /out/x /usr/local/bin/x
USER 65532:65532
EXPOSE ${PORT} 9090/udp
ENTRYPOINT ["/usr/local/bin/x"]
CMD serve --port ${PORT}
`
	f, err := Parse(text)
	if err != nil {
		t.Fatal(err)
	}
	want := &File{
		BuildTag: "ghcr.io/gpuhub/x:0.1.0",
		Stages: []*Stage{
			{Name: "build", From: "golang:1.26-bookworm", Instructions: []Instruction{
				{Line: 6, Cmd: "WORKDIR", Flags: map[string]string{}, Args: []string{"/src"}},
				{Line: 8, Cmd: "RUN", Flags: map[string]string{}, Args: []string{"CGO_ENABLED=0 go build -trimpath  -o /out/x ./services/x"}, Env: []string{"GOFLAGS=-mod=readonly"}},
			}},
			{Name: "1", From: "gcr.io/distroless/static-debian12:nonroot", Instructions: []Instruction{
				{Line: 14, Cmd: "ENV", Flags: map[string]string{}, Args: []string{"A=1", "B=two words"}},
				{Line: 15, Cmd: "ENV", Flags: map[string]string{}, Args: []string{"C=3"}},
				{Line: 16, Cmd: "COPY", Flags: map[string]string{"from": "build", "chown": "65532:65532"}, Args: []string{"/out/x", "/usr/local/bin/x"}},
				{Line: 17, Cmd: "USER", Flags: map[string]string{}, Args: []string{"65532:65532"}},
				{Line: 18, Cmd: "EXPOSE", Flags: map[string]string{}, Args: []string{"8080", "9090/udp"}},
				{Line: 19, Cmd: "ENTRYPOINT", Flags: map[string]string{}, Args: []string{"/usr/local/bin/x"}, JSON: true},
				{Line: 20, Cmd: "CMD", Flags: map[string]string{}, Args: []string{"/bin/sh", "-c", "serve --port ${PORT}"}},
			}},
		},
	}
	if diff := cmp.Diff(want, f); diff != "" {
		t.Errorf("Parse (-want +got):\n%s", diff)
	}
}

func TestParseErrors(t *testing.T) {
	tests := map[string]struct {
		text    string
		wantErr string
	}{
		"unknown instruction": {text: "FROM a\nHEALTHCHECK CMD true\n", wantErr: "2: instruction HEALTHCHECK is not supported"},
		"before FROM":         {text: "COPY a b\n", wantErr: "1: COPY before the first FROM"},
		"no FROM":             {text: "# nothing\n", wantErr: "no FROM"},
		"bad FROM":            {text: "FROM a b\n", wantErr: "1: FROM a b: want IMAGE [AS NAME]"},
		"RUN flags":           {text: "FROM a\nRUN --network=none true\n", wantErr: "2: RUN flags"},
		"COPY one arg":        {text: "FROM a\nCOPY x\n", wantErr: "2: COPY wants at least one source"},
		"COPY --link":         {text: "FROM a\nCOPY --link x y\n", wantErr: "2: COPY --link is not supported"},
		"bad exec form":       {text: "FROM a\nENTRYPOINT [\"x\"\n", wantErr: "2: ENTRYPOINT"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := Parse(tc.text)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Parse: err %v, want it to contain %q", err, tc.wantErr)
			}
		})
	}
}
