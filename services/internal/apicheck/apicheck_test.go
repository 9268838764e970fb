package apicheck

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestAccessAllows(t *testing.T) {
	alice := Caller{Name: "alice", Kind: "user"}
	root := Caller{Name: "root", Kind: "user", Admin: true}
	quota := Caller{Name: "gpu-quota", Kind: "service"}
	tests := map[string]struct {
		access, subject string
		want            map[string]bool
	}{
		"public":                  {"public", "", map[string]bool{"alice": true, "root": true, "gpu-quota": true}},
		"any":                     {"any", "", map[string]bool{"alice": true, "root": true, "gpu-quota": true}},
		"user, about themselves":  {"user", "", map[string]bool{"alice": true, "root": true, "gpu-quota": false}},
		"user-self, alice's data": {"user-self admin", "alice", map[string]bool{"alice": true, "root": true, "gpu-quota": false}},
		"user-self, bob's data":   {"user-self", "bob", map[string]bool{"alice": false, "root": false, "gpu-quota": false}},
		"admin and a service":     {"admin service:gpu-quota,gpu-culler", "", map[string]bool{"alice": false, "root": true, "gpu-quota": true}},
		"service only":            {"service:gpu-culler", "", map[string]bool{"alice": false, "root": false, "gpu-quota": false}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			a, err := ParseAccess(tc.access)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]bool{}
			for _, c := range []Caller{alice, root, quota} {
				got[c.Name] = a.Allows(c, tc.subject)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseAccessRefuses(t *testing.T) {
	for _, s := range []string{"", "everyone", "public admin", "service:"} {
		if _, err := ParseAccess(s); err == nil {
			t.Errorf("ParseAccess(%q) took it", s)
		}
	}
}

func TestJudge(t *testing.T) {
	json := map[string][]string{"Content-Type": {"application/json"}}
	tests := map[string]struct {
		strict bool
		a      answer
		want   string
	}{
		"4xx with a message":   {true, answer{400, json, []byte(`{"status":400,"message":"say x"}`)}, ""},
		"4xx without message":  {true, answer{401, json, []byte(`{"error":"no token"}`)}, `the error has no "message"`},
		"200 where 4xx is due": {true, answer{200, json, []byte(`{}`)}, "want 4xx"},
		"200 for an odd value": {false, answer{200, json, []byte(`{}`)}, ""},
		"server error":         {false, answer{500, json, []byte(`{"message":"x"}`)}, "server error"},
		"empty body":           {true, answer{404, nil, nil}, "empty body"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := judge(tc.strict, tc.a); got != tc.want {
				t.Errorf("judge = %q, want %q", got, tc.want)
			}
		})
	}
}
