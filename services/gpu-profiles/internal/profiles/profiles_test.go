package profiles_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/gpuhub/gpuhub/services/gpu-profiles/internal/catalog"
	"github.com/gpuhub/gpuhub/services/gpu-profiles/internal/fixture"
	"github.com/gpuhub/gpuhub/services/gpu-profiles/internal/profiles"
	"github.com/gpuhub/gpuhub/services/gpu-profiles/internal/quotaclient"
	"github.com/gpuhub/gpuhub/services/internal/contract"
	"github.com/gpuhub/gpuhub/services/internal/golden"
	"github.com/gpuhub/gpuhub/services/internal/policy"
)

func zoo(t testing.TB) []catalog.KindStatus {
	t.Helper()
	nodes, pods := fixture.Zoo()
	ks, err := catalog.FromObjects(nodes, pods, catalog.Options{}).Kinds()
	if err != nil {
		t.Fatal(err)
	}
	return ks
}

// readmeExample is the example overrides file of services/gpu-profiles/README.md.
func readmeExample(t testing.TB) (string, []byte) {
	t.Helper()
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)<!-- example config -->\n```yaml\n(.*?)```").FindSubmatch(data)
	if m == nil {
		t.Fatal("README.md has no example config")
	}
	return "README.md", m[1]
}

func loadExample(t *testing.T) *profiles.Config {
	t.Helper()
	name, data := readmeExample(t)
	var c profiles.Config
	if err := policy.Decode(name, data, &c); err != nil {
		t.Fatalf("the README's example does not load:\n%v", err)
	}
	return &c
}

// summary is one line per choice: slug, default star, free/total and the reason it is disabled.
func summary(ps []profiles.Profile) []string {
	var out []string
	for _, p := range ps {
		s := p.Slug
		if p.Default {
			s += "*"
		}
		if p.GPUHub.Total > 0 {
			s += " " + strings.Join([]string{itoa(p.GPUHub.Free), itoa(p.GPUHub.Total)}, "/")
		}
		if !p.GPUHub.Available {
			s += " " + p.GPUHub.Reason
		}
		out = append(out, s)
	}
	return out
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

// TestGoldenForms: the whole form (KubeSpawner's dicts and the gpuhub key) for every kind of the vocabulary,
// as generated and with the README's overrides.
func TestGoldenForms(t *testing.T) {
	ks := zoo(t)
	example := loadExample(t)
	cases := map[string]struct {
		cfg      *profiles.Config
		groups   []string
		verdicts map[string]contract.Verdict
		def      string
		want     []string
	}{
		"generated.golden": {def: "cpu", want: []string{
			"cpu*", "gpu-h100-80gb-hbm3 1/2", "gpu-l4 unschedulable",
			"mig-a100-sxm4-40gb-1g-5gb 7/8", "mig-a100-sxm4-40gb-1g-5gb-2 7/7", "mig-a100-sxm4-40gb-3g-20gb 1/2",
			"shared-t4 3/4", "shared-t4-2 4/4", "mps-a100-sxm4-40gb 0/2 none_free", "mig-shared-a100-sxm4-40gb-1g-5gb 13/14",
		}},
		"example-researcher.golden": {cfg: example, groups: []string{"researchers"}, def: example.Default,
			verdicts: map[string]contract.Verdict{
				"mig-a100-sxm4-40gb-3g-20gb": {Reason: "max_gpus", Message: "You may hold at most 1 GPU at a time; you hold 1 (one whole H100)."},
				"shared-t4":                  {Reason: "kind_not_allowed", Message: "researchers may not use time-sliced GPU shares"},
				"gpu-h100-80gb-hbm3":         {Allow: true},
			},
			// The 2-GPU choice exists (a schedulable node has 2); none has 2 free, but the H100 pool is
			// provisionable, so it stays available. 4 and 8 exist on no schedulable node (the only 8-GPU node is
			// tainted for another team).
			want: []string{
				"cpu", "gpu-h100-80gb-hbm3 1/2", "gpu-h100-80gb-hbm3-x2 0/1", "gpu-l4 unschedulable",
				"mig-a100-sxm4-40gb-1g-5gb* 7/8", "mig-a100-sxm4-40gb-1g-5gb-2 7/7", "mig-a100-sxm4-40gb-3g-20gb 1/2 quota",
				"mig-shared-a100-sxm4-40gb-1g-5gb 13/14", "big-memory", "shared-t4-2 4/4",
			}},
		"example-student.golden": {cfg: example, groups: []string{"students"}, def: example.Default,
			want: []string{
				"cpu", "mig-a100-sxm4-40gb-1g-5gb* 7/8", "mig-a100-sxm4-40gb-1g-5gb-2 7/7", "mig-a100-sxm4-40gb-3g-20gb 1/2",
				"mig-shared-a100-sxm4-40gb-1g-5gb 13/14", "big-memory", "shared-t4 3/4", "shared-t4-2 4/4",
			}},
		"example-no-groups.golden": {cfg: example, def: example.Default,
			want: []string{"cpu*", "mig-shared-a100-sxm4-40gb-1g-5gb 13/14", "big-memory", "shared-t4 3/4", "shared-t4-2 4/4"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			form := profiles.ForUser(profiles.Visible(profiles.Choices(ks, tc.cfg), tc.groups), tc.verdicts, tc.def)
			if diff := cmp.Diff(tc.want, summary(form)); diff != "" {
				t.Errorf("form (-want +got):\n%s", diff)
			}
			golden.JSON(t, name, form)
		})
	}
}

// TestNoHTML: descriptions are plain text (the glue escapes them); nothing here writes markup.
func TestNoHTML(t *testing.T) {
	for _, c := range profiles.Choices(zoo(t), loadExample(t)) {
		for _, s := range []string{c.DisplayName, c.Description, c.GPUHub.ReasonText} {
			if strings.ContainsAny(s, "<>&") {
				t.Errorf("%s: markup in %q", c.Slug, s)
			}
		}
	}
}

// TestCPUAlwaysThere: nothing hides the CPU choice, whatever the groups, the quota or the inventory.
func TestCPUAlwaysThere(t *testing.T) {
	deny := map[string]contract.Verdict{"cpu": {Reason: "kind_not_allowed"}}
	for name, ks := range map[string][]catalog.KindStatus{"zoo": zoo(t), "empty cluster": nil} {
		form := profiles.ForUser(profiles.Visible(profiles.Choices(ks, loadExample(t)), nil), deny, "nope")
		if len(form) == 0 || form[0].Slug != "cpu" || !form[0].Default || !form[0].GPUHub.Available {
			t.Errorf("%s: %v", name, summary(form))
		}
	}
}

func TestProvisionable(t *testing.T) {
	cfg := &profiles.Config{Kinds: map[string]profiles.Override{"mps-a100-sxm4-40gb": {Provisionable: ptr(true)}}}
	form := profiles.ForUser(profiles.Choices(zoo(t), cfg), nil, "cpu")
	for _, p := range form {
		if p.Slug == "mps-a100-sxm4-40gb" {
			if !p.GPUHub.Available || !strings.Contains(p.GPUHub.ReasonText, "a node is added") {
				t.Errorf("provisionable with none free: %+v", p.GPUHub)
			}
		}
	}
	if !cfg.Provisionable("mps", "mps-a100-sxm4-40gb") || cfg.Provisionable("gpu", "gpu-l4") {
		t.Error("Provisionable lookup")
	}
	if !loadExample(t).Provisionable("gpu", "gpu-h100-80gb-hbm3") {
		t.Error("the README's example makes the H100 provisionable")
	}
}

func ptr[T any](v T) *T { return &v }

func TestConfigErrors(t *testing.T) {
	cases := map[string]struct {
		yaml string
		want string
	}{
		"unknown key": {yaml: "kinds:\n  gpu:\n    multiGpu: [2]\n",
			want: `f.yaml:3:5: kinds.gpu: unknown key "multiGpu" (did you mean "multiGPU"?)`},
		"hide cpu": {yaml: "kinds:\n  cpu: {hide: true}\n", want: "f.yaml:2:8: kinds.cpu: nothing hides the CPU choice: remove hide and groups from cpu"},
		"multiGPU on MIG": {yaml: "kinds:\n  mig:\n    multiGPU: [2]\n",
			want: "f.yaml:3:15: kinds.mig.multiGPU: multiGPU is for whole GPUs only (kind gpu or a gpu-... slug)"},
		"multiGPU of 1": {yaml: "kinds:\n  gpu: {multiGPU: [1, 2]}\n", want: "f.yaml:2:20: kinds.gpu.multiGPU.0: a multi-GPU choice is 2 to 64 GPUs, found 1"},
		"bad memory":    {yaml: "defaults:\n  memLimit: 4GB\n", want: `f.yaml:2:13: defaults.memLimit: memory is a number of bytes with K, M, G or T (as in 512M or 4G), found "4GB"`},
		"bad kind key": {yaml: "kinds:\n  GPU_H100: {}\n",
			want: `f.yaml:2:3: kinds.GPU_H100: "GPU_H100" is neither a kind (gpu, mig, shared, mps, mig-shared, cpu) nor a slug (gpu-h100-80gb-hbm3)`},
		"static without slug": {yaml: "staticProfiles:\n  - display_name: x\n",
			want: "f.yaml:2:5: staticProfiles.0: a static profile needs a slug of lowercase letters, digits and dashes (KubeSpawner selects it by slug)"},
		"bad toleration":     {yaml: "tolerations:\n  - {key: a, operator: In}\n", want: `f.yaml:2:24: tolerations.0.operator: operator is Equal or Exists, found "In"`},
		"groups in defaults": {yaml: "defaults: {groups: [a]}\n", want: "f.yaml:1:11: defaults: hide, groups and multiGPU are set per kind, not in defaults"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var c profiles.Config
			err := policy.Decode("f.yaml", []byte(tc.yaml), &c)
			if err == nil || err.Error() != tc.want {
				t.Errorf("got  %v\nwant %s", err, tc.want)
			}
		})
	}
}

// fakeQuota is gpu-quota's assess.
type fakeQuota struct {
	verdicts      map[string]contract.Verdict
	err           error
	onUnavailable string
	asked         [][]string
}

func (f *fakeQuota) Assess(_ context.Context, _, _ string, _ []string, opts []contract.AssessOption) (map[string]contract.Verdict, quotaclient.Result, error) {
	var ids []string
	for _, o := range opts {
		ids = append(ids, o.ID)
	}
	f.asked = append(f.asked, ids)
	return f.verdicts, "ok", f.err
}

func (f *fakeQuota) OnUnavailable() string { return f.onUnavailable }

type kinds struct {
	ks  []catalog.KindStatus
	err error
}

func (k kinds) Kinds() ([]catalog.KindStatus, error) { return k.ks, k.err }

func TestRenderer(t *testing.T) {
	ks := zoo(t)
	at := time.Date(2026, 1, 5, 10, 0, 0, 0, time.UTC)
	cfg := &profiles.Config{Note: "Be nice.", Kinds: map[string]profiles.Override{"gpu": {Groups: []string{"researchers"}}}}
	cases := map[string]struct {
		quota       *fakeQuota
		groups      []string
		want        []string
		wantAsked   [][]string
		wantResults []string
	}{
		"no quota": {groups: []string{"students"}, wantResults: []string{profiles.QuotaNotConfigured},
			want: []string{"cpu*", "mig-a100-sxm4-40gb-1g-5gb 7/8", "mig-a100-sxm4-40gb-1g-5gb-2 7/7", "mig-a100-sxm4-40gb-3g-20gb 1/2",
				"shared-t4 3/4", "shared-t4-2 4/4", "mps-a100-sxm4-40gb 0/2 none_free", "mig-shared-a100-sxm4-40gb-1g-5gb 13/14"}},
		"gpu-quota answers; only the kinds the user sees are asked about": {groups: []string{"students"},
			quota: &fakeQuota{verdicts: map[string]contract.Verdict{
				"mig-a100-sxm4-40gb-1g-5gb": {Allow: true}, "mig-a100-sxm4-40gb-3g-20gb": {Reason: "max_gpus", Message: "Too much."},
				"shared-t4": {Reason: "kind_not_allowed"}, "shared-t4-2": {Reason: "kind_not_allowed"}, "mps-a100-sxm4-40gb": {Reason: "kind_not_allowed"},
			}},
			wantAsked: [][]string{{"mig-a100-sxm4-40gb-1g-5gb", "mig-a100-sxm4-40gb-1g-5gb-2", "mig-a100-sxm4-40gb-3g-20gb", "shared-t4",
				"shared-t4-2", "mps-a100-sxm4-40gb", "mig-shared-a100-sxm4-40gb-1g-5gb"}},
			wantResults: []string{profiles.QuotaOK},
			want: []string{"cpu*", "mig-a100-sxm4-40gb-1g-5gb 7/8", "mig-a100-sxm4-40gb-1g-5gb-2 7/7", "mig-a100-sxm4-40gb-3g-20gb 1/2 quota",
				"mig-shared-a100-sxm4-40gb-1g-5gb 13/14"}},
		"gpu-quota down, open": {groups: []string{"students"}, quota: &fakeQuota{err: errors.New("timeout"), onUnavailable: "open"},
			wantResults: []string{profiles.QuotaUnavailableOpen},
			want: []string{"cpu*", "mig-a100-sxm4-40gb-1g-5gb 7/8", "mig-a100-sxm4-40gb-1g-5gb-2 7/7", "mig-a100-sxm4-40gb-3g-20gb 1/2",
				"shared-t4 3/4", "shared-t4-2 4/4", "mps-a100-sxm4-40gb 0/2 none_free", "mig-shared-a100-sxm4-40gb-1g-5gb 13/14"}},
		"gpu-quota down, closed": {groups: []string{"students"}, quota: &fakeQuota{err: errors.New("timeout"), onUnavailable: "closed"},
			wantResults: []string{profiles.QuotaUnavailableClosed},
			want: []string{"cpu*", "mig-a100-sxm4-40gb-1g-5gb 7/8 quota", "mig-a100-sxm4-40gb-1g-5gb-2 7/7 quota", "mig-a100-sxm4-40gb-3g-20gb 1/2 quota",
				"shared-t4 3/4 quota", "shared-t4-2 4/4 quota", "mps-a100-sxm4-40gb 0/2 quota", "mig-shared-a100-sxm4-40gb-1g-5gb 13/14 quota"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var results []string
			r := &profiles.Renderer{Catalog: kinds{ks: ks}, Config: func() *profiles.Config { return cfg }, Now: func() time.Time { return at },
				OnQuota: func(res string) { results = append(results, res) }}
			if tc.quota != nil {
				r.Quota = tc.quota
			}
			res, err := r.Render(context.Background(), profiles.Request{User: "bob", Groups: tc.groups})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, summary(res.Profiles)); diff != "" {
				t.Errorf("form (-want +got):\n%s", diff)
			}
			if res.Note != "Be nice." || !res.GeneratedAt.Equal(at) {
				t.Errorf("note %q at %v", res.Note, res.GeneratedAt)
			}
			if tc.quota != nil && tc.wantAsked != nil {
				if diff := cmp.Diff(tc.wantAsked, tc.quota.asked); diff != "" {
					t.Errorf("asked (-want +got):\n%s", diff)
				}
			}
			if diff := cmp.Diff(tc.wantResults, results); diff != "" {
				t.Errorf("quota results (-want +got):\n%s", diff)
			}
		})
	}
	r := &profiles.Renderer{Catalog: kinds{err: catalog.ErrNotReady}, Config: func() *profiles.Config { return cfg }}
	if _, err := r.Render(context.Background(), profiles.Request{User: "bob"}); !errors.Is(err, catalog.ErrNotReady) {
		t.Errorf("not ready: %v", err)
	}
}

// TestStartWithoutQuotaAnswer: gpu-quota unreachable under onUnavailable closed marks the form's GPU choices
// "cannot be checked", but a start of one goes on (gpu-quota, which the glue asks next, decides); a refusal that
// gpu-quota gave is still the start's.
func TestStartWithoutQuotaAnswer(t *testing.T) {
	ks := zoo(t)
	cfg := &profiles.Config{}
	const slug = "mig-a100-sxm4-40gb-1g-5gb"
	cases := map[string]struct {
		quota      *fakeQuota
		wantReason string // of the start's refusal; "" none
	}{
		"gpu-quota down, closed": {quota: &fakeQuota{err: errors.New("timeout"), onUnavailable: "closed"}},
		"gpu-quota refuses":      {quota: &fakeQuota{verdicts: map[string]contract.Verdict{slug: {Reason: "max_gpus", Message: "You may use at most 1/7."}}}, wantReason: profiles.ReasonQuota},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := &profiles.Renderer{Catalog: kinds{ks: ks}, Config: func() *profiles.Config { return cfg }, Quota: tc.quota}
			form, err := r.Render(context.Background(), profiles.Request{User: "bob", Groups: []string{"students"}})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range form.Profiles {
				if p.Slug == slug && p.GPUHub.Reason != profiles.ReasonQuota {
					t.Errorf("the form's %s: reason %q, want %q", slug, p.GPUHub.Reason, profiles.ReasonQuota)
				}
			}
			ans, err := r.Start(context.Background(), profiles.StartRequest{User: "bob", Groups: []string{"students"}, Profile: slug, Live: true})
			if err != nil {
				t.Fatal(err)
			}
			got := ""
			if ans.Refusal != nil {
				got = ans.Refusal.Reason
			}
			if got != tc.wantReason {
				t.Errorf("start's refusal %+v, want reason %q", ans.Refusal, tc.wantReason)
			}
		})
	}
}

func TestUnknownProduct(t *testing.T) {
	n := fixture.Node("odd").Res("nvidia.com/gpu", 2).Obj()
	ks, _ := catalog.FromObjects([]*corev1.Node{n}, nil, catalog.Options{}).Kinds()
	cfg := &profiles.Config{Kinds: map[string]profiles.Override{"gpu": {MultiGPU: []int64{2}}}}
	var got []string
	for _, c := range profiles.Choices(ks, cfg) {
		got = append(got, c.Slug+": "+c.DisplayName+": "+c.Description)
	}
	want := []string{
		"cpu: CPU only: No GPU: for work that does not need one.",
		"gpu-unknown: GPU of unknown model (whole GPU): A whole GPU of unknown model, yours alone.",
		"gpu-unknown-x2: 2x GPU of unknown model (2 whole GPUs): Two whole GPUs of unknown model on one node, yours alone.",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// switchable is a catalog whose table is replaced (as the real one is after an inventory change).
type switchable struct{ ks *[]catalog.KindStatus }

func (s switchable) Kinds() ([]catalog.KindStatus, error) { return *s.ks, nil }

// TestEncodedSharedUntilChange: Encoded is Render's answer as JSON; users with the same groups and verdicts
// share one encoding, other groups or verdicts get their own, and a new inventory table is never answered from
// the old one's encodings.
func TestEncodedSharedUntilChange(t *testing.T) {
	ks := zoo(t)
	at := time.Date(2026, 1, 5, 10, 0, 0, 0, time.UTC)
	cfg := &profiles.Config{Kinds: map[string]profiles.Override{"gpu": {Groups: []string{"researchers"}}}}
	table := ks
	q := &fakeQuota{verdicts: map[string]contract.Verdict{"mig-a100-sxm4-40gb-3g-20gb": {Reason: "max_gpus", Message: "Too much."}}}
	r := &profiles.Renderer{Catalog: switchable{&table}, Config: func() *profiles.Config { return cfg }, Now: func() time.Time { return at }, Quota: q}
	ctx := context.Background()
	encode := func(user string, groups ...string) string {
		t.Helper()
		req := profiles.Request{User: user, Groups: groups}
		body, err := r.Encoded(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		res, err := r.Render(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(res)
		if diff := cmp.Diff(string(want)+"\n", string(body)); diff != "" {
			t.Errorf("Encoded differs from Render for %s %v (-render +encoded):\n%s", user, groups, diff)
		}
		return string(body)
	}
	bob, alice := encode("bob", "students"), encode("alice", "students")
	if bob != alice {
		t.Error("two students with the same verdicts got different forms")
	}
	if carol := encode("carol", "researchers"); carol == bob {
		t.Error("a researcher got a student's form (whole GPUs are for researchers only)")
	}
	q.verdicts = map[string]contract.Verdict{}
	dave := encode("dave", "students")
	if dave == bob {
		t.Error("a student whom gpu-quota allows everything got the form of one it refuses the 3g.20gb slice")
	}
	q.verdicts = map[string]contract.Verdict{"mig-a100-sxm4-40gb-3g-20gb": {Allow: true, HeldForOthers: 1}}
	held := encode("erin", "students")
	if held == dave {
		t.Error("a student for whom the waitlist holds the free 3g.20gb slice got the form of one it does not")
	}
	q.verdicts = map[string]contract.Verdict{"mig-a100-sxm4-40gb-3g-20gb": {Allow: true, HeldForYouUntil: at.Add(10 * time.Minute)}}
	if holder := encode("frank", "students"); holder == dave || holder == held {
		t.Error("the holder of the 3g.20gb slice got another student's form")
	}
	// The inventory changes: a new table (the catalog never changes one in place).
	table = slices.Clone(ks)
	for i := range table {
		if table[i].Slug == "shared-t4" {
			table[i].Free, table[i].FreeOnNodes = 0, nil
		}
	}
	q.verdicts = map[string]contract.Verdict{"mig-a100-sxm4-40gb-3g-20gb": {Reason: "max_gpus", Message: "Too much."}}
	if encode("bob", "students") == bob {
		t.Error("after an inventory change bob got the form encoded before it")
	}
}

// TestWaitlistHolds: units the waitlist holds for others are not free for the user (with nothing left, the
// choice says why: reason waitlist); the holder is told the unit is theirs until when; quota still comes first.
func TestWaitlistHolds(t *testing.T) {
	until := time.Date(2026, 11, 23, 14, 5, 30, 0, time.FixedZone("CET", 3600))
	type shown struct {
		Free            int64
		Available       bool
		Reason, Text    string
		HeldForYouUntil time.Time
	}
	cases := map[string]struct {
		slug    string
		verdict contract.Verdict
		want    shown
	}{
		"nothing held": {slug: "gpu-h100-80gb-hbm3", verdict: contract.Verdict{Allow: true},
			want: shown{Free: 1, Available: true}},
		"the only free H100 held for someone else": {slug: "gpu-h100-80gb-hbm3", verdict: contract.Verdict{Allow: true, HeldForOthers: 1},
			want: shown{Reason: "waitlist", Text: "None free for you right now: the free H100 is held for the next person on the waitlist."}},
		"more held than free: the words count those free": {slug: "gpu-h100-80gb-hbm3", verdict: contract.Verdict{Allow: true, HeldForOthers: 2},
			want: shown{Reason: "waitlist", Text: "None free for you right now: the free H100 is held for the next person on the waitlist."}},
		"one of seven slices held: six left": {slug: "mig-a100-sxm4-40gb-1g-5gb", verdict: contract.Verdict{Allow: true, HeldForOthers: 1},
			want: shown{Free: 6, Available: true}},
		"every free slice held": {slug: "mig-a100-sxm4-40gb-1g-5gb", verdict: contract.Verdict{Allow: true, HeldForOthers: 7},
			want: shown{Reason: "waitlist", Text: "None free for you right now: the free MIG 1g.5gb slices on an A100 are held for the next people on the waitlist."}},
		"held for this user": {slug: "gpu-h100-80gb-hbm3", verdict: contract.Verdict{Allow: true, HeldForYouUntil: until},
			want: shown{Free: 1, Available: true, HeldForYouUntil: until.UTC(),
				Text: "Your turn on the waitlist: one is held for you until 13:05 UTC. Start it before then, or it passes to the next person in line."}},
		"nothing was free anyway: none free, not the waitlist": {slug: "mps-a100-sxm4-40gb", verdict: contract.Verdict{Allow: true, HeldForOthers: 1},
			want: shown{Reason: "none_free", Text: "None free right now: all 2 in use."}},
		"over quota: the quota's words": {slug: "gpu-h100-80gb-hbm3", verdict: contract.Verdict{Reason: "max_gpus", Message: "Too much.", HeldForOthers: 1},
			want: shown{Free: 1, Reason: "quota", Text: "Too much."}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			form := profiles.ForUser(profiles.Choices(zoo(t), nil), map[string]contract.Verdict{tc.slug: tc.verdict}, "cpu")
			i := slices.IndexFunc(form, func(p profiles.Profile) bool { return p.Slug == tc.slug })
			if i < 0 {
				t.Fatalf("no %s in %v", tc.slug, summary(form))
			}
			g := form[i].GPUHub
			got := shown{Free: g.Free, Available: g.Available, Reason: g.Reason, Text: g.ReasonText, HeldForYouUntil: g.HeldForYouUntil}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestWaitlistMarks: with the Hub offering the waitlist, each GPU choice with no unit free for the user is marked
// to join for (none free, or the free ones held for others); a choice over quota is not (waiting would not
// help), nor one with units free. Without it nothing is marked, and the two forms are encoded apart.
func TestWaitlistMarks(t *testing.T) {
	q := &fakeQuota{verdicts: map[string]contract.Verdict{
		"gpu-h100-80gb-hbm3":         {Allow: true, HeldForOthers: 1},
		"mig-a100-sxm4-40gb-3g-20gb": {Reason: "max_gpus", Message: "Too much."},
	}}
	cfg := &profiles.Config{} // one configuration: the renderer keeps its encoded forms
	r := &profiles.Renderer{Catalog: kinds{ks: zoo(t)}, Config: func() *profiles.Config { return cfg }, Quota: q}
	marks := func(waitlist bool) []string {
		t.Helper()
		req := profiles.Request{User: "bob", Groups: []string{"students"}, Waitlist: waitlist}
		body, err := r.Encoded(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		var res struct {
			Profiles []struct {
				Slug     string `json:"slug"`
				Waitlist string `json:"gpuhub_waitlist"`
			} `json:"profiles"`
		}
		if err := json.Unmarshal(body, &res); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, p := range res.Profiles {
			if p.Waitlist != "" {
				out = append(out, p.Slug+" "+p.Waitlist)
			}
		}
		return out
	}
	want := []string{"gpu-h100-80gb-hbm3 exhausted", "mps-a100-sxm4-40gb exhausted"}
	if diff := cmp.Diff(want, marks(true)); diff != "" {
		t.Errorf("marks with the waitlist (-want +got):\n%s", diff)
	}
	if got := marks(false); got != nil {
		t.Errorf("marks without the waitlist: %v", got)
	}
	if diff := cmp.Diff(want, marks(true)); diff != "" {
		t.Errorf("marks with the waitlist again (-want +got):\n%s", diff)
	}
	// A group whose name starts like a flag does not share a form with the waitlist's.
	for _, g := range []string{"1students", "wstudents"} {
		body, err := r.Encoded(context.Background(), profiles.Request{User: "eve", Groups: []string{g}})
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(body), "gpuhub_waitlist") {
			t.Errorf("group %s without the waitlist got the marked form: %s", g, body)
		}
	}
}
