package valuesdoc

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestRows(t *testing.T) {
	tests := map[string]struct {
		values   string
		want     []Row
		wantErr  string
		wantNone bool
	}{
		"scalars, maps, lists and an empty string": {
			values: `# -- Override the name.
nameOverride: ""
agent:
  # -- Run the agent.
  enabled: true
  # -- Requests and limits.
  # Two lines.
  resources:
    requests: {cpu: 10m}
    limits: {memory: 128Mi}
  # -- Pull secrets.
  pullSecrets: []
`,
			want: []Row{
				{Key: "`nameOverride`", Default: "`\"\"`", Description: "Override the name."},
				{Key: "`agent.enabled`", Default: "`true`", Description: "Run the agent."},
				{Key: "`agent.resources`", Default: "`{requests: {cpu: 10m}, limits: {memory: 128Mi}}`", Description: "Requests and limits. Two lines."},
				{Key: "`agent.pullSecrets`", Default: "`[]`", Description: "Pull secrets."},
			},
		},
		"free text before the description, a default override": {
			values: `quota:
  # Not part of the description.
  # -- The policy file.
  # @default -- no limits
  policy: |
    default: {}
`,
			want: []Row{{Key: "`quota.policy`", Default: "no limits", Description: "The policy file."}},
		},
		"a multi-line string without an override": {
			values: "# -- Policy.\npolicy: |\n  a: 1\n",
			want:   []Row{{Key: "`policy`", Default: "see values.yaml", Description: "Policy."}},
		},
		"undocumented values are named": {
			values:  "agent:\n  # -- Documented.\n  enabled: true\n  port: 9400\nlogLevel: info\n",
			wantErr: "agent.port, logLevel",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := Rows([]byte(tc.values))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Rows error = %v, want one naming %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Rows (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTableEscapesPipes(t *testing.T) {
	got := Table([]Row{{Key: "`a`", Default: "`x`", Description: "one | two"}})
	want := "| value | default | |\n|---|---|---|\n| `a` | `x` | one \\| two |\n"
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Table (-want +got):\n%s", diff)
	}
}

func TestReplace(t *testing.T) {
	doc := "intro\n<!-- BEGIN part: generated -->\nold\n<!-- END part -->\nrest\n"
	tests := map[string]struct {
		doc, name, want, wantErr string
	}{
		"replaced":   {doc: doc, name: "part", want: "intro\n<!-- BEGIN part: generated -->\nnew\n<!-- END part -->\nrest\n"},
		"no begin":   {doc: doc, name: "other", wantErr: "no \"<!-- BEGIN other -->\" marker"},
		"no end":     {doc: "<!-- BEGIN part -->\nold\n", name: "part", wantErr: "no \"<!-- END part -->\" marker"},
		"same twice": {doc: doc + doc, name: "part", want: "intro\n<!-- BEGIN part: generated -->\nnew\n<!-- END part -->\nrest\n" + doc},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := Replace(tc.doc, tc.name, "new\n")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Replace error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Replace (-want +got):\n%s", diff)
			}
		})
	}
}
