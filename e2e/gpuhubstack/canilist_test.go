package gpuhubstack

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"
	"strings"
	"testing"
	"text/tabwriter"

	gocmp "github.com/google/go-cmp/cmp"
	authorizationv1 "k8s.io/api/authorization/v1"
)

// accessKey is one row of `kubectl auth can-i --list`: a resource ("leases.coordination.k8s.io"; core resources
// without a group) with one resource name or none, or a non-resource URL.
type accessKey struct {
	resource, name, url string
}

// access is what a SelfSubjectRulesReview allows, broken down to one entry per resource, resource name and URL
// (as kubectl breaks rules down before printing), with the verbs allowed on each.
type access map[accessKey]map[string]bool

// accessOf breaks a review's rules down. Rules that name several groups, resources or names become one row each.
func accessOf(st authorizationv1.SubjectRulesReviewStatus) access {
	a := access{}
	add := func(k accessKey, verbs []string) {
		if a[k] == nil {
			a[k] = map[string]bool{}
		}
		for _, v := range verbs {
			a[k][v] = true
		}
	}
	for _, r := range st.ResourceRules {
		names := r.ResourceNames
		if len(names) == 0 {
			names = []string{""}
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				if g != "" {
					res += "." + g
				}
				for _, n := range names {
					add(accessKey{resource: res, name: n}, r.Verbs)
				}
			}
		}
	}
	for _, r := range st.NonResourceRules {
		for _, u := range r.NonResourceURLs {
			add(accessKey{url: u}, r.Verbs)
		}
	}
	return a
}

// without returns a less every verb that every is allowed too, dropping rows left with none.
func (a access) without(every access) access {
	out := access{}
	for k, verbs := range a {
		for v := range verbs {
			if every[k][v] || every[k]["*"] {
				continue
			}
			if out[k] == nil {
				out[k] = map[string]bool{}
			}
			out[k][v] = true
		}
	}
	return out
}

// table renders a as kubectl auth can-i --list prints it: a header, then resource rows sorted by resource and
// name, then non-resource URL rows sorted by URL; lists in brackets, verbs sorted.
func (a access) table() string {
	keys := make([]accessKey, 0, len(a))
	for k := range a {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(x, y accessKey) int {
		// Resource rows first, as kubectl prints them.
		if xURL, yURL := x.url != "", y.url != ""; xURL != yURL {
			if xURL {
				return 1
			}
			return -1
		}
		return cmp.Or(cmp.Compare(x.resource, y.resource), cmp.Compare(x.name, y.name), cmp.Compare(x.url, y.url))
	})
	list := func(s string) string {
		if s == "" {
			return "[]"
		}
		return "[" + s + "]"
	}
	var b bytes.Buffer
	w := tabwriter.NewWriter(&b, 0, 8, 3, ' ', 0)
	fmt.Fprintln(w, "Resources\tNon-Resource URLs\tResource Names\tVerbs")
	for _, k := range keys {
		verbs := make([]string, 0, len(a[k]))
		for v := range a[k] {
			verbs = append(verbs, v)
		}
		slices.Sort(verbs)
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", k.resource, list(k.url), list(k.name), list(strings.Join(verbs, " ")))
	}
	_ = w.Flush()
	// tabwriter pads the last column's cells too; a golden file should not end lines in spaces.
	lines := strings.Split(b.String(), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	return strings.Join(lines, "\n")
}

func TestAccessTable(t *testing.T) {
	tests := map[string]struct {
		st    authorizationv1.SubjectRulesReviewStatus
		every authorizationv1.SubjectRulesReviewStatus
		want  string
	}{
		"rules broken down, merged and sorted": {
			st: authorizationv1.SubjectRulesReviewStatus{
				ResourceRules: []authorizationv1.ResourceRule{
					{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: []string{"gpuhub-quota"}, Verbs: []string{"update", "get"}},
					{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create"}},
					{APIGroups: []string{""}, Resources: []string{"pods", "nodes"}, Verbs: []string{"list", "get", "watch"}},
					{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"patch"}},
				},
				NonResourceRules: []authorizationv1.NonResourceRule{{NonResourceURLs: []string{"/version", "/api/*"}, Verbs: []string{"get"}}},
			},
			want: `Resources                    Non-Resource URLs   Resource Names   Verbs
leases.coordination.k8s.io   []                  []               [create]
leases.coordination.k8s.io   []                  [gpuhub-quota]   [get update]
nodes                        []                  []               [get list watch]
pods                         []                  []               [get list patch watch]
                             [/api/*]            []               [get]
                             [/version]          []               [get]
`,
		},
		"what every account may do is left out": {
			st: authorizationv1.SubjectRulesReviewStatus{
				ResourceRules: []authorizationv1.ResourceRule{
					{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"selfsubjectrulesreviews"}, Verbs: []string{"create"}},
					{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list"}},
				},
				NonResourceRules: []authorizationv1.NonResourceRule{{NonResourceURLs: []string{"/healthz"}, Verbs: []string{"get"}}},
			},
			every: authorizationv1.SubjectRulesReviewStatus{
				ResourceRules: []authorizationv1.ResourceRule{
					{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"selfsubjectrulesreviews"}, Verbs: []string{"create"}},
					{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}},
				},
				NonResourceRules: []authorizationv1.NonResourceRule{{NonResourceURLs: []string{"/healthz"}, Verbs: []string{"*"}}},
			},
			want: `Resources   Non-Resource URLs   Resource Names   Verbs
pods        []                  []               [list]
`,
		},
		"nothing": {
			want: "Resources   Non-Resource URLs   Resource Names   Verbs\n",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := accessOf(tc.st).without(accessOf(tc.every)).table()
			if diff := gocmp.Diff(tc.want, got); diff != "" {
				t.Errorf("table (-want +got):\n%s", diff)
			}
		})
	}
}
