package profiles

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpuhub/gpuhub/services/gpu-profiles/internal/catalog"
	"github.com/gpuhub/gpuhub/services/gpu-profiles/internal/quotaclient"
	"github.com/gpuhub/gpuhub/services/internal/contract"
	"github.com/gpuhub/gpuhub/services/internal/rightsize"
)

// Kinds is the catalog as the renderer reads it (*catalog.Catalog).
type Kinds interface {
	Kinds() ([]catalog.KindStatus, error)
}

// Assessor asks gpu-quota about a user's choices (*quotaclient.Client).
type Assessor interface {
	Assess(ctx context.Context, user, server string, groups []string, opts []contract.AssessOption) (map[string]contract.Verdict, quotaclient.Result, error)
	OnUnavailable() string
}

// Advisor holds the usage API's right-size advice per user (*adviceclient.Client). It answers from memory and
// never waits on the network: ok is false while nothing is held, and the form is then drawn without a mark.
type Advisor interface {
	Advice(user string) (advice []contract.RightSize, ok bool)
}

// Request is the Hub glue's question (contract C1).
type Request struct {
	User   string   `json:"user"`
	Groups []string `json:"groups"`
	Server string   `json:"server"`
	// Waitlist says the Hub offers joining gpu-quota's waitlist from the form: each GPU choice with no unit free
	// for the user is marked as one to join for (gpuhub_waitlist: exhausted).
	Waitlist bool `json:"waitlist"`
	// start: the choices are judged for a start (Start), not shown on a form.
	start bool
}

// Response is the user's form (contract C1).
type Response struct {
	Profiles    []Profile `json:"profiles"`
	GeneratedAt time.Time `json:"generatedAt"`
	Note        string    `json:"note"`
}

// Quota results of a render, for the metrics.
const (
	// QuotaPushed: the verdicts came from gpu-quota's watch, held in memory (no round trip).
	QuotaPushed            = "pushed"
	QuotaOK                = "ok"
	QuotaCached            = "cached"
	QuotaUnavailableOpen   = "unavailable_open"
	QuotaUnavailableClosed = "unavailable_closed"
	QuotaNotConfigured     = "not_configured"
	QuotaNothingToAsk      = "nothing_to_ask"
)

// ReasonQuotaUnavailable is the verdict on every GPU choice while gpu-quota cannot answer and says closed.
const ReasonQuotaUnavailable = "quota_unavailable"

// Renderer renders a user's form from the live catalog, the configuration in use and gpu-quota.
type Renderer struct {
	Catalog Kinds
	Config  func() *Config
	// Quota is nil when gpu-quota is not asked (--quota-url empty): no choice is disabled for quota.
	Quota Assessor
	Now   func() time.Time
	// OnQuota, if set, is told how gpu-quota's part of each render went (a Quota* constant).
	OnQuota func(result string)
	// Advice is nil when the usage API is not asked (--usage-url empty): no choice is marked recommended.
	Advice Advisor
	// Logger, if set, gets a warning when gpu-quota cannot answer (at most once a minute).
	Logger   *slog.Logger
	lastWarn atomic.Int64

	mu   sync.Mutex
	memo memo
	// bodies are encoded answers of the memo's choices, by what else a form depends on (forms).
	bodies map[string][]byte
}

// maxBodies bounds the encoded answers kept between two changes of the inventory or the configuration: one per
// set of groups and quota verdicts seen, so a few dozen in practice.
const maxBodies = 4096

// memo keeps the choices of the last table and configuration: renders between two inventory changes share them.
type memo struct {
	kinds   *catalog.KindStatus
	n       int
	cfg     *Config
	choices []Choice
}

// Render answers one user. The error is the catalog's (not synced or unhealthy): the glue falls back.
func (r *Renderer) Render(ctx context.Context, req Request) (Response, error) {
	kinds, err := r.Catalog.Kinds()
	if err != nil {
		return Response{}, err
	}
	cfg := r.Config()
	choices := Visible(r.choices(kinds, cfg), req.Groups)
	return r.respond(cfg, choices, r.assess(ctx, req, choices), req.Waitlist, r.advice(req)), nil
}

// Encoded is Render's answer as the JSON body the API sends. A form depends on nothing of the user but their
// groups and gpu-quota's verdicts, so users alike share one encoding until the inventory or the configuration
// changes: with many forms at once, encoding the same answer again was most of a render's cost (B7).
func (r *Renderer) Encoded(ctx context.Context, req Request) ([]byte, error) {
	kinds, err := r.Catalog.Kinds()
	if err != nil {
		return nil, err
	}
	cfg := r.Config()
	all := r.choices(kinds, cfg)
	choices := Visible(all, req.Groups)
	verdicts := r.assess(ctx, req, choices)
	adv := r.advice(req)
	key := formKey(req.Groups, verdicts, req.Waitlist) + adviceKey(adv)
	r.mu.Lock()
	body, ok := r.bodies[key]
	fresh := r.memo.choices != nil && len(all) > 0 && len(r.memo.choices) > 0 && &r.memo.choices[0] == &all[0]
	r.mu.Unlock()
	if ok && fresh {
		return body, nil
	}
	body, err = json.Marshal(r.respond(cfg, choices, verdicts, req.Waitlist, adv))
	if err != nil {
		return nil, err
	}
	body = append(body, '\n')
	r.mu.Lock()
	if len(r.memo.choices) > 0 && len(all) > 0 && &r.memo.choices[0] == &all[0] {
		if r.bodies == nil || len(r.bodies) >= maxBodies {
			r.bodies = map[string][]byte{}
		}
		r.bodies[key] = body
	}
	r.mu.Unlock()
	return body, nil
}

// formKey names what a form depends on besides the choices: the user's groups (which choices they see),
// gpu-quota's verdicts on them, the waitlist's holds included, and whether the Hub offers the waitlist.
func formKey(groups []string, verdicts map[string]contract.Verdict, waitlist bool) string {
	var b strings.Builder
	flag := byte('0') // one byte, always there: no group name that follows can be read as it
	if waitlist {
		flag = '1'
	}
	b.WriteByte(flag)
	gs := slices.Clone(groups)
	slices.Sort(gs)
	for _, g := range gs {
		b.WriteString(g)
		b.WriteByte(0)
	}
	b.WriteByte(1)
	for _, id := range slices.Sorted(maps.Keys(verdicts)) {
		v := verdicts[id]
		v.ID = id // the map's key names it
		quotaclient.WriteVerdictKey(&b, v)
	}
	return b.String()
}

func (r *Renderer) respond(cfg *Config, choices []Choice, verdicts map[string]contract.Verdict, waitlist bool, adv *contract.RightSize) Response {
	def := catalog.SlugCPU
	note := ""
	if cfg != nil {
		if cfg.Default != "" {
			def = cfg.Default
		}
		note = cfg.Note
	}
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	profiles := ForUser(choices, verdicts, def)
	if waitlist {
		for i := range profiles {
			if profiles[i].GPUHub.exhausted() {
				profiles[i].Waitlist = WaitlistExhausted
			}
		}
	}
	if adv != nil {
		Recommend(profiles, *adv)
	}
	return Response{Profiles: profiles, GeneratedAt: now().UTC().Truncate(time.Second), Note: note}
}

func (r *Renderer) choices(kinds []catalog.KindStatus, cfg *Config) []Choice {
	r.mu.Lock()
	defer r.mu.Unlock()
	// The catalog hands out the same table until something changes: its first element's address names it.
	var first *catalog.KindStatus
	if len(kinds) > 0 {
		first = &kinds[0]
	}
	if r.memo.choices != nil && r.memo.kinds == first && r.memo.n == len(kinds) && r.memo.cfg == cfg {
		return r.memo.choices
	}
	c := Choices(kinds, cfg)
	r.memo = memo{kinds: first, n: len(kinds), cfg: cfg, choices: c}
	r.bodies = nil // encoded for the old choices
	return c
}

// warnQuota logs why gpu-quota did not answer, at most once a minute: a 403 (gpu-profiles missing from its
// --reader-services) would otherwise only move a metric while every form shows choices as its onUnavailable says.
func (r *Renderer) warnQuota(err error) {
	if r.Logger == nil {
		return
	}
	now := time.Now()
	last := r.lastWarn.Load()
	if now.UnixNano()-last < int64(time.Minute) || !r.lastWarn.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	r.Logger.Warn("gpu-quota did not answer; the forms follow its onUnavailable (logged at most once a minute)", "err", err)
}

func (r *Renderer) tell(result string) {
	if r.OnQuota != nil {
		r.OnQuota(result)
	}
}

// WatchOptions are the GPU choices any form may show, as gpu-quota is asked about them: what gpu-quota's watch
// of verdicts covers (a render filters them per user and group, and its verdicts are by option ID). ok is false
// while the catalog cannot say (not synced).
func (r *Renderer) WatchOptions() ([]contract.AssessOption, bool) {
	kinds, err := r.Catalog.Kinds()
	if err != nil {
		return nil, false
	}
	return assessOptions(r.choices(kinds, r.Config())), true
}

// assessOptions are the choices that ask for GPUs, as gpu-quota is asked about them.
func assessOptions(choices []Choice) []contract.AssessOption {
	var opts []contract.AssessOption
	for _, c := range choices {
		if c.Resources != nil {
			opts = append(opts, contract.AssessOption{ID: c.Slug, Resources: c.Resources, NodeSelector: c.Override.NodeSelector})
		}
	}
	return opts
}

// assess asks gpu-quota about the GPU choices; while it cannot answer, its onUnavailable decides.
func (r *Renderer) assess(ctx context.Context, req Request, choices []Choice) map[string]contract.Verdict {
	if r.Quota == nil {
		r.tell(QuotaNotConfigured)
		return nil
	}
	opts := assessOptions(choices)
	if len(opts) == 0 {
		r.tell(QuotaNothingToAsk)
		return nil
	}
	vs, res, err := r.Quota.Assess(ctx, req.User, req.Server, req.Groups, opts)
	if err != nil {
		r.warnQuota(err)
		// A start is never refused here for want of gpu-quota's answer: the glue asks gpu-quota itself next, and
		// gpu-quota decides, closed or not (a refusal on missing data otherwise: gpu-profiles cut off from
		// gpu-quota during a rolling upgrade refused starts that gpu-quota, answering through its Service, admitted).
		if r.Quota.OnUnavailable() != contract.Closed || req.start {
			r.tell(QuotaUnavailableOpen)
			return nil
		}
		r.tell(QuotaUnavailableClosed)
		out := make(map[string]contract.Verdict, len(opts))
		for _, o := range opts {
			out[o.ID] = contract.Verdict{Reason: ReasonQuotaUnavailable,
				Message: "Your GPU quota cannot be checked right now, so GPUs cannot be started; try again in a minute, or choose CPU only."}
		}
		return out
	}
	r.tell(string(res))
	return vs
}

// advice is the advice for the server the form is for, when it says smaller: the one measured most recently
// when the server ran on several classes. nil: no mark (none held, the usage API not asked, keep, not enough
// data, or a server never measured).
func (r *Renderer) advice(req Request) *contract.RightSize {
	if r.Advice == nil {
		return nil
	}
	all, ok := r.Advice.Advice(req.User)
	if !ok {
		return nil
	}
	var best *contract.RightSize
	for i := range all {
		a := &all[i]
		if a.Server != req.Server || a.Verdict != contract.VerdictSmaller {
			continue
		}
		if best == nil || a.Evidence.To.After(best.Evidence.To) {
			best = a
		}
	}
	return best
}

// adviceKey adds to formKey what the mark depends on: the candidates in order and the evidence's words.
func adviceKey(a *contract.RightSize) string {
	if a == nil {
		return ""
	}
	var b strings.Builder
	b.WriteByte(2)
	for _, c := range a.Candidates {
		b.WriteString(c.Class)
		b.WriteByte(0)
	}
	b.WriteByte(2)
	b.WriteString(recommendedText(*a))
	return b.String()
}

// Recommend marks the first of the advice's candidates the user may take in this form (rightsize.First): a GPU
// choice of its class that is available to them now. Nothing is marked when none is; the advice's other
// candidates are not shown, since the form already lists what they may choose.
func Recommend(profiles []Profile, a contract.RightSize) {
	index := map[string]int{}
	for i, p := range profiles {
		// The first choice of a class is its one-unit choice (Choices orders counts up); static choices have
		// no class of the vocabulary.
		if p.GPUHub.Class == "" || p.GPUHub.Kind == KindStatic || p.GPUHub.Count > 1 || !p.GPUHub.Available {
			continue
		}
		if _, seen := index[p.GPUHub.Class]; !seen {
			index[p.GPUHub.Class] = i
		}
	}
	c, ok := rightsize.First(a, func(k contract.RightSizeKind) bool { _, ok := index[k.Class]; return ok })
	if !ok {
		return
	}
	p := &profiles[index[c.Class]]
	p.GPUHub.Recommended = true
	p.GPUHub.RecommendedText = recommendedText(a)
	p.Description = strings.TrimSpace(p.Description + " " + p.GPUHub.RecommendedText)
}

// recommendedText says why in the evidence's numbers: "Recommended for you: your server used at most 4.0 GiB of
// GPU memory and 10 % of its whole H100-80GB-HBM3 (p95 while busy) over 6.0 h busy; this would have done."
func recommendedText(a contract.RightSize) string {
	e := a.Evidence
	server := "your default server"
	if a.Server != "" {
		server = "your server " + strconv.Quote(a.Server)
	}
	held := a.Held.Description
	if held == "" {
		held = a.Held.Class
	}
	sim := ""
	if a.Simulated {
		sim = " (measured on simulated GPU use)"
	}
	return fmt.Sprintf("Recommended for you: %s used at most %.1f GiB of GPU memory and %.0f %% of its %s (p95 while busy) over %.1f h busy%s; this would have done.",
		server, float64(e.PeakMemoryBytes)/(1<<30), e.P95SMUtilPercent, lowerWhole(held), e.BusySeconds/3600, sim)
}

// lowerWhole writes "Whole H100" as "whole H100" inside a sentence; other descriptions keep their capitals.
func lowerWhole(s string) string {
	if rest, ok := strings.CutPrefix(s, "Whole "); ok {
		return "whole " + rest
	}
	return s
}
