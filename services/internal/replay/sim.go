package replay

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"

	ckit "github.com/gpuhub/gpuhub/services/gpu-culler/replaykit"
	pkit "github.com/gpuhub/gpuhub/services/gpu-profiles/replaykit"
	qkit "github.com/gpuhub/gpuhub/services/gpu-quota/replaykit"
	"github.com/gpuhub/gpuhub/services/internal/decision"
	"github.com/gpuhub/gpuhub/services/internal/gpu"
)

// Mode is one of the compared setups.
type Mode int

// The setups, on the same trace and capacity.
const (
	// Kubernetes is plain Kubernetes: whole GPUs, pending pods placed in arrival order when they fit, no culling.
	Kubernetes Mode = iota
	// HubCuller is Kubernetes with jupyterhub-idle-culler: a server with no Hub activity for an hour is stopped.
	HubCuller
	// GPUHub is gpu-quota's admission, gpu-profiles' choices (time-sliced shares for small requests) and
	// gpu-culler's GPU-activity culling with warnings and snoozes; a refused user tries again later.
	GPUHub
	// GPUHubWaitlist is GPUHub with gpu-quota's waitlist: fair-share order, holds, auto-start, and the culler's
	// idleWhenContended while someone waits.
	GPUHubWaitlist
)

// Modes are every setup in table order.
var Modes = []Mode{Kubernetes, HubCuller, GPUHub, GPUHubWaitlist}

func (m Mode) String() string {
	return [...]string{"Kubernetes", "Kubernetes + idle-culler", "gpuhub", "gpuhub + waitlist"}[m]
}

func (m Mode) gpuhub() bool { return m >= GPUHub }

// Env is what every run shares: the scenario, the workload and the gpuhub runs' policies (parsed by the
// services' own parsers).
type Env struct {
	Cfg      *Config
	W        *Workload
	Quota    *qkit.Policy
	Culler   *ckit.Policy
	Profiles *pkit.Config
}

// NewEnv parses the policies with the services' parsers.
func NewEnv(cfg *Config, w *Workload, p Policies) (*Env, error) {
	q, err := qkit.ParsePolicy(p.QuotaName, p.Quota)
	if err != nil {
		return nil, fmt.Errorf("gpu-quota policy: %w", err)
	}
	c, err := ckit.ParsePolicy(p.CullerName, p.Culler)
	if err != nil {
		return nil, fmt.Errorf("gpu-culler policy: %w", err)
	}
	pr, err := pkit.ParseConfig(p.ProfilesName, p.Profiles)
	if err != nil {
		return nil, fmt.Errorf("gpu-profiles overrides: %w", err)
	}
	return &Env{Cfg: cfg, W: w, Quota: q, Culler: c, Profiles: pr}, nil
}

// epoch is minute 0 of the simulated clock (any fixed time: the trace's own times are relative).
var epoch = time.Date(2023, 6, 1, 0, 0, 0, 0, time.UTC)

func clock(t int) time.Time { return epoch.Add(time.Duration(t) * time.Minute) }

func minutesOf(d time.Duration) int { return max(1, int(d/time.Minute)) }

type state int

const (
	stIdle    state = iota // not asked yet
	stWaiting              // asked, no GPU yet
	stBound                // admitted (gpuhub) but no node fits yet: the pod is Pending
	stRunning
	stCulled // stopped by a culler; the user comes back at their next busy minute
	stDone
)

// server is one session's notebook server in one run.
type server struct {
	s        *Session
	st       state
	askedAt  int
	nextTry  int
	joined   bool
	pod      *corev1.Pod
	node     *simNode
	res      map[string]int64
	selector map[string]string
	slug     string
	class    string
	kind     gpu.Kind
	share    float64
	units    int64
	started  int
	lastHub  int
	notice   ckit.Notice
	culledAt int
}

// run is one setup replaying the workload.
type run struct {
	env  *Env
	mode Mode
	cl   *cluster
	eng  *qkit.Engine
	cat  *pkit.Catalog
	t    int

	servers  []*server
	byName   map[string]*server
	running  []*server
	waiting  []*server // in the order they asked
	culled   []*server
	bound    []*server
	rules    map[string]ckit.Rule
	samples  []ckit.Sample
	ledger   map[string]map[string]float64 // user -> class -> GPU-hours x 2^(t/halfLife)
	decayed  map[string]map[string]float64
	halfLife float64 // minutes

	m *Result
}

// Run replays the workload under mode and returns its numbers.
func Run(env *Env, mode Mode) (*Result, error) {
	cfg, w := env.Cfg, env.W
	seed := strconv.FormatUint(cfg.Seed, 10)
	shared := 0.0
	if mode.gpuhub() {
		shared = cfg.Capacity.SharedFraction
	}
	r := &run{env: env, mode: mode, cl: newCluster(seed, w.Nodes, shared, cfg.Capacity.Replicas),
		byName: map[string]*server{}, rules: map[string]ckit.Rule{}, ledger: map[string]map[string]float64{},
		halfLife: cfg.Behaviour.FairShareHalfLife.Std().Minutes()}
	r.m = newResult(mode, w, r.cl.gpus)
	for _, s := range w.Sessions {
		sv := &server{s: s}
		r.servers = append(r.servers, sv)
		r.byName[s.Pod] = sv
	}
	if mode.gpuhub() {
		if err := r.startServices(); err != nil {
			return nil, err
		}
	}
	next := 0
	cullEvery := minutesOf(cfg.Behaviour.HubCullEvery.Std())
	passEvery := minutesOf(env.Culler.EveryPeriod())
	for r.t = 0; r.t < w.Minutes; r.t++ {
		t := r.t
		for next < len(r.servers) && r.servers[next].s.Start <= t {
			r.ask(r.servers[next])
			next++
		}
		r.endSessions()
		r.comeBack()
		switch {
		case mode.gpuhub():
			r.serveGPUHub()
		default:
			r.serveKubernetes()
		}
		switch {
		case mode == HubCuller && t%cullEvery == 0:
			r.hubCullerPass()
		case mode.gpuhub() && t%passEvery == 0:
			r.cullerPass()
		}
		r.account()
	}
	r.m.finish(r)
	return r.m, nil
}

// startServices builds gpu-quota's engine and gpu-profiles' catalog and feeds them the nodes, as the informers
// would.
func (r *run) startServices() error {
	now := func() time.Time { return clock(r.t) }
	log, err := decision.NewLog(decision.Options{Service: "gpu-quota", Size: 16, Now: now})
	if err != nil {
		return err
	}
	groups := map[string][]string{}
	for u, g := range r.env.W.GroupOf {
		groups[u] = []string{g}
	}
	o := qkit.Options{Policy: func() *qkit.Policy { return r.env.Quota }, Log: log, Now: now,
		Directory: func() (map[string][]string, error) { return groups, nil }}
	if r.mode == GPUHubWaitlist {
		o.Waitlist = qkit.WaitlistOptions{Enabled: true, Hold: r.env.Cfg.Behaviour.WaitlistHold.Std(),
			Decayed: func() (map[string]map[string]float64, bool) { return r.decayed, r.decayed != nil }}
	}
	if r.eng, err = qkit.New(o); err != nil {
		return err
	}
	if r.mode == GPUHubWaitlist {
		r.eng.LoadWaitlist(qkit.WaitlistState{})
	}
	r.cat = pkit.NewCatalog(pkit.CatalogOptions{})
	for _, n := range r.cl.nodes {
		obj := nodeObject(n)
		r.eng.NodeHandler().OnAdd(obj, true)
		r.cat.NodeHandler().OnAdd(obj, true)
	}
	return nil
}

// ask is the user asking for a GPU server now (a new session, or coming back to a culled one).
func (r *run) ask(sv *server) {
	sv.st, sv.askedAt, sv.nextTry, sv.joined = stWaiting, r.t, r.t, false
	r.waiting = append(r.waiting, sv)
	r.m.requests++
}

// endSessions stops the servers of users who are done, and gives up the requests of those who never got one.
func (r *run) endSessions() {
	t := r.t
	for _, sv := range slices.Clone(r.running) {
		if sv.s.End <= t {
			r.release(sv)
			sv.st = stDone
		}
	}
	for _, sv := range slices.Clone(r.bound) {
		if sv.s.End <= t {
			r.m.waited(t-sv.askedAt, true)
			r.unbind(sv)
			sv.st = stDone
		}
	}
	kept := r.waiting[:0]
	for _, sv := range r.waiting {
		if sv.s.End > t {
			kept = append(kept, sv)
			continue
		}
		r.m.waited(t-sv.askedAt, true)
		if sv.joined {
			_ = r.eng.Leave(sv.s.User, sv.s.Pod)
		}
		sv.st = stDone
	}
	r.waiting = kept
	keptC := r.culled[:0]
	for _, sv := range r.culled {
		if sv.s.End > t {
			keptC = append(keptC, sv)
			continue
		}
		r.m.returned += sv.share * float64(sv.s.End-sv.culledAt) / 60
		sv.st = stDone
	}
	r.culled = keptC
}

// comeBack: a user whose server was culled asks again when they next want to run a cell.
func (r *run) comeBack() {
	keptC := r.culled[:0]
	for _, sv := range r.culled {
		if !sv.s.Busy(r.t) {
			keptC = append(keptC, sv)
			continue
		}
		r.m.returned += sv.share * float64(r.t-sv.culledAt) / 60
		r.m.comebacks++
		r.ask(sv)
	}
	r.culled = keptC
}

// serveKubernetes places pending pods in the order they were created, each where it fits (the scheduler does
// not block the queue on a pod that does not fit).
func (r *run) serveKubernetes() {
	kept := r.waiting[:0]
	for _, sv := range r.waiting {
		res := map[string]int64{gpu.ResourceGPU: sv.s.GPUs}
		n := r.cl.place(gpu.ResourceGPU, sv.s.GPUs, nil)
		if n == nil {
			kept = append(kept, sv)
			continue
		}
		sv.res, sv.selector, sv.slug = res, nil, ""
		r.started(sv, n)
	}
	r.waiting = kept
}

// started records that sv got its GPU on n now.
func (r *run) started(sv *server, n *simNode) {
	sv.node, sv.st, sv.started, sv.lastHub, sv.notice = n, stRunning, r.t, r.t, ckit.Notice{}
	sv.class, sv.kind, sv.share = classOf(sv.res, n)
	sv.units = sv.res[n.resource]
	r.m.waited(r.t-sv.askedAt, false)
	r.running = append(r.running, sv)
	if r.mode.gpuhub() {
		p := bound(sv.pod, n.name, clock(r.t))
		sv.pod = p
		r.eng.PodHandler().OnUpdate(nil, p)
		r.cat.PodHandler().OnUpdate(nil, p)
	}
}

// release gives sv's GPU back (the server stopped).
func (r *run) release(sv *server) {
	sv.node.free += sv.units
	r.running = slices.DeleteFunc(r.running, func(x *server) bool { return x == sv })
	if r.mode.gpuhub() {
		r.eng.PodHandler().OnDelete(sv.pod)
		r.cat.PodHandler().OnDelete(sv.pod)
	}
	sv.node, sv.pod = nil, nil
}

func (r *run) unbind(sv *server) {
	r.bound = slices.DeleteFunc(r.bound, func(x *server) bool { return x == sv })
	r.eng.PodHandler().OnDelete(sv.pod)
	sv.pod = nil
}

// serveGPUHub: the waitlist's turn (auto-start of held entries), pods admitted but not yet placed, then every
// waiting user whose retry is due opens the spawn form.
func (r *run) serveGPUHub() {
	if r.mode == GPUHubWaitlist {
		if r.decayed == nil || r.t%minutesOf(r.env.Cfg.Behaviour.LedgerEvery.Std()) == 0 {
			r.refreshDecayed()
		}
		tick := r.eng.WaitlistTick(clock(r.t))
		for _, en := range tick.Start {
			sv := r.byName[en.Server]
			if sv == nil || sv.st != stWaiting {
				continue
			}
			r.eng.MarkStartRequested(en.User, en.Server, true)
			if !r.admit(sv, en.Resources, en.NodeSelector, en.Profile, false) {
				r.eng.MarkStartRequested(en.User, en.Server, false)
			}
		}
	}
	for _, sv := range slices.Clone(r.bound) {
		if n := r.cl.place(sv.node0Resource(), sv.res[sv.node0Resource()], sv.selector); n != nil {
			r.bound = slices.DeleteFunc(r.bound, func(x *server) bool { return x == sv })
			r.started(sv, n)
		}
	}
	for _, sv := range slices.Clone(r.waiting) {
		if sv.st == stWaiting && sv.nextTry <= r.t {
			r.tryForm(sv)
		}
	}
}

// node0Resource is the one GPU resource sv asks for.
func (sv *server) node0Resource() string {
	for res := range sv.res {
		return res
	}
	return ""
}

// want is the kind and count of choice a session takes, and the kind it falls back to: a small fractional
// request a time-sliced share, else whole GPUs.
func (r *run) want(s *Session) (kind string, count int64, fallback string) {
	if s.Fractional() && s.Milli <= r.env.Cfg.Requests.SharedUpToMilli {
		return string(gpu.KindShared), 1, string(gpu.KindGPU)
	}
	return string(gpu.KindGPU), s.GPUs, ""
}

// tryForm is the user opening the spawn form (gpu-profiles' choices for them, with gpu-quota's verdicts) and
// starting the available choice of what they need with the most free; with none available, joining the
// waitlist (GPUHubWaitlist) for the largest pool of it.
func (r *run) tryForm(sv *server) {
	sv.nextTry = r.t + minutesOf(r.env.Cfg.Behaviour.RetryEvery.Std())
	r.m.formViews++
	kinds, err := r.cat.Kinds()
	if err != nil {
		return
	}
	groups := []string{sv.s.Group}
	choices := pkit.Visible(pkit.Choices(kinds, r.env.Profiles), groups)
	bySlug := map[string]pkit.Choice{}
	var opts []qkit.AssessOption
	for _, c := range choices {
		if c.Resources != nil {
			bySlug[c.Slug] = c
			opts = append(opts, qkit.AssessOption{ID: c.Slug, Resources: c.Resources, NodeSelector: c.Override.NodeSelector})
		}
	}
	verdicts := map[string]pkit.Verdict{}
	a, err := r.eng.Assess(context.Background(), qkit.AssessRequest{User: sv.s.User, Server: sv.s.Pod, Groups: groups, Options: opts})
	if err != nil {
		return
	}
	for _, v := range a.Options {
		verdicts[v.ID] = pkit.Verdict{Allow: v.Allow, Reason: v.Reason, Message: v.Message}
	}
	form := pkit.ForUser(choices, verdicts, "")
	kind, count, fallback := r.want(sv.s)
	pick := func(kind string, count int64, available bool) (pkit.Profile, bool) {
		var best pkit.Profile
		found := false
		for _, p := range form {
			g := p.GPUHub
			if g.Kind != kind || g.Count != count || g.Available != available || (!available && g.Reason != "none_free") {
				continue
			}
			if !found || (available && g.Free > best.GPUHub.Free) || (!available && g.Total > best.GPUHub.Total) {
				best, found = p, true
			}
		}
		return best, found
	}
	p, ok := pick(kind, count, true)
	if !ok && fallback != "" {
		p, ok = pick(fallback, 1, true)
	}
	if ok {
		c := bySlug[p.Slug]
		if r.admit(sv, c.Resources, c.Override.NodeSelector, c.Slug, false) {
			return
		}
	}
	if r.mode != GPUHubWaitlist || sv.joined {
		r.m.refusals++
		return
	}
	if p, ok = pick(kind, count, false); ok {
		c := bySlug[p.Slug]
		r.admit(sv, c.Resources, c.Override.NodeSelector, c.Slug, true)
	}
}

// admit asks gpu-quota to admit sv with a choice (and to join the waitlist when nothing is free, with join);
// admitted, the pod is created and placed.
func (r *run) admit(sv *server, res map[string]int64, selector map[string]string, slug string, join bool) bool {
	req := qkit.Request{User: sv.s.User, Server: sv.s.Pod, Groups: []string{sv.s.Group}, Resources: res,
		NodeSelector: selector, Profile: slug}
	if join {
		req.Waitlist = &qkit.WaitlistChoice{Join: true, AutoStart: true}
	}
	out, err := r.eng.Admit(context.Background(), req)
	if err != nil {
		r.m.errors++
		return false
	}
	if !out.Allow {
		if out.Waitlist != nil {
			sv.joined = true
			r.m.joins++
		}
		if out.Reason != string(qkit.ReasonNoneFree) && out.Reason != string(qkit.ReasonWaitlist) {
			r.m.quotaRefusals++
		}
		return false
	}
	r.m.admissions++
	sv.res, sv.selector, sv.slug = res, selector, slug
	sv.pod = podObject(sv.s.User, sv.s.Pod, slug, res, selector, clock(r.t))
	r.eng.PodHandler().OnAdd(sv.pod, false)
	r.waiting = slices.DeleteFunc(r.waiting, func(x *server) bool { return x == sv })
	resource := sv.node0Resource()
	if n := r.cl.place(resource, res[resource], selector); n != nil {
		r.started(sv, n)
	} else {
		sv.st = stBound
		r.bound = append(r.bound, sv)
	}
	return true
}

// hubCullerPass is jupyterhub-idle-culler's pass: a server without Hub activity for the timeout is stopped,
// without a warning.
func (r *run) hubCullerPass() {
	timeout := minutesOf(r.env.Cfg.Behaviour.HubIdleTimeout.Std())
	for _, sv := range slices.Clone(r.running) {
		if r.t-sv.lastHub >= timeout {
			r.cull(sv)
		}
	}
}

// lookback bounds the telemetry handed to Decide: longer than any idle period plus its warning.
const lookback = 4 * 60

// cullerPass is gpu-culler's pass: Decide for every running server on its own GPU telemetry, the notice
// kept as the pod would keep it, snoozes by users who have the tab open, and stops.
func (r *run) cullerPass() {
	now := clock(r.t)
	contended := map[string]bool{}
	if r.mode == GPUHubWaitlist {
		cs, err := r.eng.Contended()
		if err == nil {
			for _, c := range cs {
				contended[c.Class] = true
			}
		}
	}
	every := r.env.Culler.EveryPeriod()
	for _, sv := range slices.Clone(r.running) {
		rule := r.rule(sv.kind, sv.slug)
		in := ckit.Input{Now: now, Rule: rule, Usage: ckit.Usage{Reachable: true, At: now}, Notice: sv.notice,
			Contended: contended[sv.class],
			Server: ckit.Server{User: sv.s.User, Name: sv.s.Pod, Groups: []string{sv.s.Group}, Kind: sv.kind, Profile: sv.slug,
				Started: clock(sv.started), LastActivity: clock(sv.lastHub), Ready: true},
			Telemetry: r.telemetry(sv)}
		d := ckit.Decide(in)
		r.m.decisions++
		switch d.Action {
		case ckit.None:
			sv.notice = ckit.Notice{}
		case ckit.Warn, ckit.Skip:
			if d.Deadline.IsZero() {
				continue
			}
			if sv.notice.Since.IsZero() {
				sv.notice = ckit.Notice{Reason: d.Reason, Since: now}
				r.m.warnings++
			}
			sv.notice.Reason, sv.notice.Deadline = d.Reason, d.Deadline
			if !now.Add(every).Before(d.Deadline) && sv.s.TabOpen(r.t) &&
				unit(strconv.FormatUint(r.env.Cfg.Seed, 10), "snooze", sv.s.Pod, strconv.Itoa(r.t)) < r.env.Cfg.Behaviour.SnoozeWhenTabOpen {
				if n, err := ckit.Snooze(rule, sv.notice, now, contended[sv.class]); err == nil {
					sv.notice = n
					r.m.snoozes++
				}
			}
		case ckit.Stop:
			r.cull(sv)
		}
	}
}

func (r *run) rule(kind gpu.Kind, slug string) ckit.Rule {
	key := string(kind) + "/" + slug
	rule, ok := r.rules[key]
	if !ok {
		rule = r.env.Culler.Rule(kind, slug)
		r.rules[key] = rule
	}
	return rule
}

// telemetry is the server's GPU samples as the usage API would serve them, one a minute: the newest alone while
// busy; while idle, back to the start of the idle stretch (at most lookback), memory unchanged.
func (r *run) telemetry(sv *server) ckit.Telemetry {
	const memory = 4 << 30
	t := r.t
	if sv.s.Busy(t) {
		r.samples = append(r.samples[:0], ckit.Sample{At: clock(t), Utilization: r.env.Cfg.Idleness.BusyUtilization, MemoryBytes: memory})
		return ckit.Telemetry{Present: true, Samples: r.samples}
	}
	from := t
	for from > sv.started && from > t-lookback && !sv.s.Busy(from-1) {
		from--
	}
	r.samples = r.samples[:0]
	for i := from; i <= t; i++ {
		r.samples = append(r.samples, ckit.Sample{At: clock(i), MemoryBytes: memory})
	}
	return ckit.Telemetry{Present: true, Samples: r.samples}
}

// cull stops sv for idleness; it is a false cull when its GPU would have been busy within the window.
func (r *run) cull(sv *server) {
	r.m.culls++
	window := minutesOf(r.env.Cfg.Behaviour.FalseCullWindow.Std())
	for i := r.t; i < r.t+window; i++ {
		if sv.s.Busy(i) {
			r.m.falseCulls++
			break
		}
	}
	r.release(sv)
	sv.st, sv.culledAt = stCulled, r.t
	r.culled = append(r.culled, sv)
}

// refreshDecayed is every user's GPU-hours by class, decayed by the fair-share half-life (what the usage API's
// gpu-hours/decayed serves the waitlist).
func (r *run) refreshDecayed() {
	scale := math.Exp2(-float64(r.t) / r.halfLife)
	out := make(map[string]map[string]float64, len(r.ledger))
	for u, byClass := range r.ledger {
		m := make(map[string]float64, len(byClass))
		for c, v := range byClass {
			m[c] = v * scale
		}
		out[u] = m
	}
	r.decayed = out
}

// account adds this minute to the numbers: what is held, busy and idle, who wanted their GPU and who had it.
func (r *run) account() {
	t := r.t
	idle := 0.0
	// Contended: someone asked and has no GPU yet (culled users who have not asked again do not count).
	contended := len(r.waiting)+len(r.bound) > 0
	if contended {
		r.m.contendedMin++
	}
	for _, sv := range r.running {
		busy := sv.s.Busy(t)
		if sv.s.HubActive(t) {
			sv.lastHub = t
		}
		r.m.heldMin += sv.share
		if busy {
			r.m.busyMin += sv.share
			r.m.delivered[sv.s.User]++
			r.m.wanted[sv.s.User]++
			if contended {
				r.m.deliveredContended[sv.s.User]++
				r.m.wantedContended[sv.s.User]++
			}
		} else {
			idle += sv.share
		}
		if r.mode == GPUHubWaitlist {
			byClass := r.ledger[sv.s.User]
			if byClass == nil {
				byClass = map[string]float64{}
				r.ledger[sv.s.User] = byClass
			}
			byClass[sv.class] += sv.share / 60 * math.Exp2(float64(t)/r.halfLife)
		}
	}
	for _, list := range [][]*server{r.waiting, r.bound, r.culled} {
		for _, sv := range list {
			if sv.s.Busy(t) {
				r.m.wanted[sv.s.User]++
				if contended {
					r.m.wantedContended[sv.s.User]++
				}
			}
		}
	}
	r.m.idleMin += idle
	r.m.addIdle(t, idle)
	for _, n := range r.cl.nodes {
		if n.free < 0 || n.free > n.units {
			r.m.overcommitted++
		}
	}
}
