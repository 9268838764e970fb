package profiles_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuhub/gpuhub/services/gpu-profiles/internal/profiles"
	"github.com/gpuhub/gpuhub/services/internal/contract"
	"github.com/gpuhub/gpuhub/services/internal/golden"
)

// fakeAdvice is the usage API's advice as the advice client holds it: by user, nothing for one not listed.
type fakeAdvice map[string][]contract.RightSize

func (f fakeAdvice) Advice(user string) ([]contract.RightSize, bool) {
	a, ok := f[user]
	return a, ok
}

// smaller is advice for a server that held a whole A100-class share and fits the zoo's smaller A100 kinds,
// cheapest first: MPS (none free in the zoo), MIG 1g.5gb (two pools), MIG 3g.20gb.
func smaller(server string, to time.Time) contract.RightSize {
	kind := func(class string) contract.RightSizeCandidate {
		return contract.RightSizeCandidate{RightSizeKind: contract.RightSizeKind{Class: class}}
	}
	return contract.RightSize{User: "bob", Server: server, Verdict: contract.VerdictSmaller,
		Held:       contract.RightSizeKind{Class: "gpu A100-SXM4-40GB", Description: "Whole A100-SXM4-40GB"},
		Candidates: []contract.RightSizeCandidate{kind("mps A100-SXM4-40GB"), kind("mig A100-SXM4-40GB 1g.5gb"), kind("mig A100-SXM4-40GB 3g.20gb")},
		Evidence:   contract.RightSizeEvidence{To: to, BusySeconds: 6 * 3600, PeakMemoryBytes: 3 << 30, P95SMUtilPercent: 8}}
}

func recommended(ps []profiles.Profile) []string {
	var out []string
	for _, p := range ps {
		if p.GPUHub.Recommended {
			out = append(out, p.Slug)
			if !strings.HasSuffix(p.Description, p.GPUHub.RecommendedText) {
				t := p.Description
				out = append(out, "description without the text: "+t)
			}
		}
	}
	return out
}

// TestRecommend: the form marks the first candidate the user may take now, for the server the form is for.
func TestRecommend(t *testing.T) {
	ks := zoo(t)
	at := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	cfg := &profiles.Config{Kinds: map[string]profiles.Override{"gpu": {Groups: []string{"researchers"}}}}
	cases := map[string]struct {
		advice   fakeAdvice
		server   string
		verdicts map[string]contract.Verdict
		groups   []string
		want     []string
		wantText string
	}{
		// MPS has none free: the first candidate the user can choose now is the first 1g.5gb pool.
		"smaller": {advice: fakeAdvice{"bob": {smaller("", at)}}, groups: []string{"students"},
			want:     []string{"mig-a100-sxm4-40gb-1g-5gb"},
			wantText: "Recommended for you: your default server used at most 3.0 GiB of GPU memory and 8 % of its whole A100-SXM4-40GB (p95 while busy) over 6.0 h busy; this would have done."},
		"quota refuses the first pool: the second pool of the class": {advice: fakeAdvice{"bob": {smaller("", at)}}, groups: []string{"students"},
			verdicts: map[string]contract.Verdict{"mig-a100-sxm4-40gb-1g-5gb": {Reason: "max_gpus", Message: "Too much."}},
			want:     []string{"mig-a100-sxm4-40gb-1g-5gb-2"}},
		"quota refuses every 1g.5gb: the 3g.20gb": {advice: fakeAdvice{"bob": {smaller("", at)}}, groups: []string{"students"},
			verdicts: map[string]contract.Verdict{"mig-a100-sxm4-40gb-1g-5gb": {Reason: "max_gpus"}, "mig-a100-sxm4-40gb-1g-5gb-2": {Reason: "kind_not_allowed"}},
			want:     []string{"mig-a100-sxm4-40gb-3g-20gb"}},
		"none of the candidates may be taken": {advice: fakeAdvice{"bob": {smaller("", at)}}, groups: []string{"students"},
			verdicts: map[string]contract.Verdict{"mig-a100-sxm4-40gb-1g-5gb": {Reason: "max_gpus"}, "mig-a100-sxm4-40gb-1g-5gb-2": {Reason: "max_gpus"},
				"mig-a100-sxm4-40gb-3g-20gb": {Reason: "max_gpus"}}},
		"a named server's form reads its own advice": {server: "train",
			advice: fakeAdvice{"bob": {smaller("", at), smaller("train", at)}}, groups: []string{"students"},
			want:     []string{"mig-a100-sxm4-40gb-1g-5gb"},
			wantText: `Recommended for you: your server "train" used at most 3.0 GiB of GPU memory and 8 % of its whole A100-SXM4-40GB (p95 while busy) over 6.0 h busy; this would have done.`},
		"a server never measured":   {server: "new", advice: fakeAdvice{"bob": {smaller("", at)}}, groups: []string{"students"}},
		"keep":                      {advice: fakeAdvice{"bob": {{User: "bob", Verdict: contract.VerdictKeep}}}, groups: []string{"students"}},
		"not enough data":           {advice: fakeAdvice{"bob": {{User: "bob", Verdict: contract.VerdictNotEnoughData}}}, groups: []string{"students"}},
		"nothing held for the user": {advice: fakeAdvice{}, groups: []string{"students"}},
		"the newest of two classes": {advice: fakeAdvice{"bob": {
			func() contract.RightSize {
				a := smaller("", at.Add(-time.Hour))
				a.Candidates = a.Candidates[2:]
				return a
			}(), smaller("", at)}}, groups: []string{"students"},
			want: []string{"mig-a100-sxm4-40gb-1g-5gb"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := &profiles.Renderer{Catalog: kinds{ks: ks}, Config: func() *profiles.Config { return cfg }, Now: func() time.Time { return at },
				Quota: &fakeQuota{verdicts: tc.verdicts}, Advice: tc.advice}
			req := profiles.Request{User: "bob", Groups: tc.groups, Server: tc.server}
			res, err := r.Render(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, recommended(res.Profiles)); diff != "" {
				t.Errorf("recommended (-want +got):\n%s", diff)
			}
			if tc.wantText != "" {
				for _, p := range res.Profiles {
					if p.GPUHub.Recommended && p.GPUHub.RecommendedText != tc.wantText {
						t.Errorf("text\n got %q\nwant %q", p.GPUHub.RecommendedText, tc.wantText)
					}
				}
			}
			body, err := r.Encoded(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := json.Marshal(res)
			if diff := cmp.Diff(string(want)+"\n", string(body)); diff != "" {
				t.Errorf("Encoded differs from Render (-render +encoded):\n%s", diff)
			}
			if name == "smaller" {
				golden.JSON(t, "recommended.golden", res.Profiles)
			}
		})
	}
}

// TestRecommendEncodedPerAdvice: users alike share one encoded form, but not once their advice differs.
func TestRecommendEncodedPerAdvice(t *testing.T) {
	ks := zoo(t)
	at := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	adv := fakeAdvice{"bob": {smaller("", at)}}
	r := &profiles.Renderer{Catalog: kinds{ks: ks}, Config: func() *profiles.Config { return &profiles.Config{} }, Now: func() time.Time { return at },
		Advice: adv}
	encode := func(user string) string {
		t.Helper()
		b, err := r.Encoded(context.Background(), profiles.Request{User: user, Groups: []string{"students"}})
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	bob, alice := encode("bob"), encode("alice")
	if bob == alice || !strings.Contains(bob, `"recommended":true`) || strings.Contains(alice, `"recommended"`) {
		t.Errorf("bob's advice leaked into alice's form, or is missing from his:\nbob %s\nalice %s", bob, alice)
	}
	adv["alice"] = adv["bob"]
	if encode("alice") != bob {
		t.Error("two users with the same groups and advice got different forms")
	}
}
