package replay

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"

	ckit "github.com/gpuhub/gpuhub/services/gpu-culler/cullerkit"
	pkit "github.com/gpuhub/gpuhub/services/gpu-profiles/profileskit"
	qkit "github.com/gpuhub/gpuhub/services/gpu-quota/quotakit"
	"github.com/gpuhub/gpuhub/services/internal/decision"
	"github.com/gpuhub/gpuhub/services/internal/gpu"
	"github.com/gpuhub/gpuhub/services/internal/rightsize"
)

// Mode is one of the compared setups. Every setup runs on the same cluster: the same nodes and the same
// time-slicing (Env.Cluster); they differ only in which gpuhub parts run.
type Mode int

// The setups, on the same trace, capacity and sharing: the two anchors, gpuhub with all its parts, and gpuhub
// with each part off in turn (the ablation).
const (
	// Kubernetes is plain Kubernetes: pending pods placed in arrival order when they fit, no culling.
	Kubernetes Mode = iota
	// HubCuller is Kubernetes with jupyterhub-idle-culler: a server with no Hub activity for an hour is stopped.
	HubCuller
	// GPUHub is every gpuhub part: gpu-quota's admission with gpu-profiles' spawn form (quotas, choices with
	// what is free, a refused user tries again later), gpu-culler's GPU-activity culling with warnings and
	// snoozes, and gpu-quota's waitlist (fair-share order, holds, auto-start, idleWhenContended).
	GPUHub
	// GPUHubNoCulling is GPUHub without gpu-culler: no server is stopped for idleness.
	GPUHubNoCulling
	// GPUHubNoAdmission is GPUHub without gpu-quota's admission and gpu-profiles' form: pods queue in the
	// scheduler as in Kubernetes. The waitlist is part of gpu-quota's admission, so it is off too: what is left
	// is gpu-culler (without idleWhenContended, which needs the waitlist).
	GPUHubNoAdmission
	// GPUHubNoWaitlist is GPUHub without the waitlist (the chart's default: gpuQuota.waitlist.enabled false).
	GPUHubNoWaitlist
	// GPUHubRightSize is GPUHub where a share of the users (rightSize.follow) follow the right-size advice:
	// after a whole-GPU server stops, the advice on its profile (advice.go); when it names a time-sliced share,
	// their next one-GPU sessions take one. Last in value so that the others keep theirs; next to GPUHub in Modes.
	GPUHubRightSize
)

// Modes are every setup in table order.
var Modes = []Mode{Kubernetes, HubCuller, GPUHub, GPUHubRightSize, GPUHubNoCulling, GPUHubNoAdmission, GPUHubNoWaitlist}

func (m Mode) String() string {
	return [...]string{"Kubernetes", "Kubernetes + idle-culler", "gpuhub", "gpuhub − culling",
		"gpuhub − quotas/packing", "gpuhub − waitlist", "gpuhub + right-size advice"}[m]
}

// admission: gpu-quota admits and gpu-profiles' form offers the choices (else the scheduler's pending queue).
func (m Mode) admission() bool {
	return m == GPUHub || m == GPUHubNoCulling || m == GPUHubNoWaitlist || m == GPUHubRightSize
}

// waitlist: gpu-quota's waitlist runs (and gpu-culler's idleWhenContended with it).
func (m Mode) waitlist() bool { return m == GPUHub || m == GPUHubNoCulling || m == GPUHubRightSize }

// gpuCuller: gpu-culler's pass runs every minute.
func (m Mode) gpuCuller() bool {
	return m == GPUHub || m == GPUHubNoAdmission || m == GPUHubNoWaitlist || m == GPUHubRightSize
}

// rightSize: a share of the users follow the right-size advice.
func (m Mode) rightSize() bool { return m == GPUHubRightSize }

// hubCuller: jupyterhub-idle-culler's pass runs.
func (m Mode) hubCuller() bool { return m == HubCuller }

// cost orders the runs, longest first: gpu-quota's engine, its waitlist and gpu-culler's pass are what take time.
func (m Mode) cost() int {
	c := 0
	for _, on := range []bool{m.admission(), m.waitlist(), m.gpuCuller()} {
		if on {
			c++
		}
	}
	return c
}

// Env is what every run shares: the scenario, the workload, the cluster (its nodes and which of them the admin
// time-slices: the same for every setup) and the gpuhub runs' policies (parsed by the services' own parsers).
type Env struct {
	Cfg      *Config
	W        *Workload
	Quota    *qkit.Policy
	Culler   *ckit.Policy
	Profiles *pkit.Config
	// cluster is the nodes as the admin configured them; every run starts from a copy.
	cluster *cluster
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
	cl := newCluster(strconv.FormatUint(cfg.Seed, 10), w.Nodes, cfg.Capacity.SharedFraction, cfg.Capacity.Replicas)
	return &Env{Cfg: cfg, W: w, Quota: q, Culler: c, Profiles: pr, cluster: cl}, nil
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
	// idleFrom is the first minute of the idle stretch the server was in at minute idleSeen (telemetry's memo:
	// a stretch's start does not move while it lasts).
	idleFrom, idleSeen int
	// small: the user follows right-size advice and this session takes a share instead of a whole GPU.
	small bool
	// measured is what the usage API has of the server while it held a whole GPU (right-size mode only).
	measured Measured
}

// run is one setup replaying the workload.
type run struct {
	env  *Env
	mode Mode
	cl   *cluster
	eng  *qkit.Engine
	cat  *pkit.Catalog
	t    int

	servers []*server
	byName  map[string]*server
	running []*server
	waiting []*server // in the order they asked
	culled  []*server
	bound   []*server
	rules   map[ruleKey]ckit.Rule
	samples []ckit.Sample
	// forms are the choices by group for the catalog table whose first kind is formKinds (choices).
	forms     map[string]groupForm
	formKinds *pkit.KindStatus
	ledger    map[string]map[string]float64 // user -> class -> GPU-hours x 2^(t/halfLife)
	decayed   map[string]map[string]float64
	halfLife  float64 // minutes

	// Right-size advice (GPUHubRightSize): the users who follow it, those who took it, their work's intensity
	// and the kinds the cluster offers.
	follows, advised map[string]bool
	intensity        map[string]Intensity
	offers           []rightsize.Offer

	m *Result
}

// Run replays the workload under mode and returns its numbers.
func Run(env *Env, mode Mode) (*Result, error) {
	cfg, w := env.Cfg, env.W
	r := &run{env: env, mode: mode, cl: env.cluster.clone(),
		byName: map[string]*server{}, rules: map[ruleKey]ckit.Rule{}, ledger: map[string]map[string]float64{},
		halfLife: cfg.Behaviour.FairShareHalfLife.Std().Minutes()}
	r.m = newResult(mode, w, r.cl.layout())
	if mode.rightSize() {
		r.m.Label = fmt.Sprintf("%s (%.0f %% follow)", mode, 100*cfg.RightSize.Follow)
		r.startRightSize()
	}
	for _, s := range w.Sessions {
		sv := &server{s: s}
		r.servers = append(r.servers, sv)
		r.byName[s.Pod] = sv
	}
	if mode.admission() {
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
		case mode.admission():
			r.serveGPUHub()
		default:
			r.serveKubernetes()
		}
		switch {
		case mode.hubCuller() && t%cullEvery == 0:
			r.hubCullerPass()
		case mode.gpuCuller() && t%passEvery == 0:
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
	if r.mode.waitlist() {
		o.Waitlist = qkit.WaitlistOptions{Enabled: true, Hold: r.env.Cfg.Behaviour.WaitlistHold.Std(),
			Decayed: func() (map[string]map[string]float64, bool) { return r.decayed, r.decayed != nil }}
	}
	if r.eng, err = qkit.New(o); err != nil {
		return err
	}
	if r.mode.waitlist() {
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

// ask is the user asking for a GPU server now (a new session, or coming back to a culled one). A user who took
// right-size advice asks for a share for a new one-GPU session (a culled one comes back as it was).
func (r *run) ask(sv *server) {
	if sv.st == stIdle && r.advised[sv.s.User] && sv.s.GPUs == 1 && !r.takesShare(sv.s) {
		sv.small = true
		r.m.rightSized++
	}
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
			r.m.waited(r.size(sv), t-sv.askedAt, true)
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
		r.m.waited(r.size(sv), t-sv.askedAt, true)
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
// not block the queue on a pod that does not fit). A pod asks for what its user picked on z2jh's static
// profile list: a time-sliced share for a small request when the cluster has them, else whole GPUs; it waits
// for that, whatever else is free (the list does not say what is).
func (r *run) serveKubernetes() {
	kept := r.waiting[:0]
	for _, sv := range r.waiting {
		resource, count := gpu.ResourceGPU, sv.s.GPUs
		if r.takesShare(sv.s) {
			resource, count = gpu.ResourceGPUShared, 1
		}
		res := map[string]int64{resource: count}
		n := r.cl.place(resource, count, nil)
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
	r.m.waited(r.size(sv), r.t-sv.askedAt, false)
	r.running = append(r.running, sv)
	if r.eng != nil {
		p := bound(sv.pod, n.name, clock(r.t))
		sv.pod = p
		r.eng.PodHandler().OnUpdate(nil, p)
		r.cat.PodHandler().OnUpdate(nil, p)
	}
}

// release gives sv's GPU back (the server stopped).
func (r *run) release(sv *server) {
	if r.mode.rightSize() {
		r.advise(sv)
	}
	sv.node.free += sv.units
	r.running = slices.DeleteFunc(r.running, func(x *server) bool { return x == sv })
	if r.eng != nil {
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
	if r.mode.waitlist() {
		if r.decayed == nil || r.t%minutesOf(r.env.Cfg.Behaviour.LedgerEvery.Std()) == 0 {
			r.refreshDecayed()
		}
		// gpu-quota ticks its waitlist every few seconds; the simulation only while someone is on it: with no
		// entry a tick changes nothing (reservations expire wherever they are read).
		var tick qkit.TickResult
		if st, _, _ := r.eng.WaitlistSnapshot(); len(st.Entries) > 0 {
			tick = r.eng.WaitlistTick(clock(r.t))
		}
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

// takesShare reports whether the session asks for a time-sliced share: its request is part of one GPU, at most
// requests.sharedUpToMilli, and the cluster has time-sliced nodes. The same in every setup.
func (r *run) takesShare(s *Session) bool {
	return r.cl.shared && s.Fractional() && s.Milli <= r.env.Cfg.Requests.SharedUpToMilli
}

// size is what the session asks for, for the report: whole GPUs, or 0 for a time-sliced share.
func (r *run) size(sv *server) int64 {
	if sv.small || r.takesShare(sv.s) {
		return 0
	}
	return sv.s.GPUs
}

// want is the kind and count of choice a session takes on gpu-profiles' form, and the kind it falls back to
// when none is free (the form shows what is): a time-sliced share (takesShare, or right-size advice taken),
// else whole GPUs.
func (r *run) want(sv *server) (kind string, count int64, fallback string) {
	s := sv.s
	if sv.small || r.takesShare(s) {
		return string(gpu.KindShared), 1, string(gpu.KindGPU)
	}
	return string(gpu.KindGPU), s.GPUs, ""
}

// tryForm is the user opening the spawn form (gpu-profiles' choices for them, with gpu-quota's verdicts) and
// starting the available choice of what they need with the most free; with none available, joining the
// waitlist (when it runs) for the largest pool of it.
func (r *run) tryForm(sv *server) {
	sv.nextTry = r.t + minutesOf(r.env.Cfg.Behaviour.RetryEvery.Std())
	r.m.formViews++
	kinds, err := r.cat.Kinds()
	if err != nil {
		return
	}
	groups := []string{sv.s.Group}
	f := r.choices(kinds, sv.s.Group)
	choices, bySlug, opts := f.choices, f.bySlug, f.opts
	verdicts := map[string]pkit.Verdict{}
	a, err := r.eng.Assess(context.Background(), qkit.AssessRequest{User: sv.s.User, Server: sv.s.Pod, Groups: groups, Options: opts})
	if err != nil {
		return
	}
	for _, v := range a.Options {
		verdicts[v.ID] = pkit.Verdict{Allow: v.Allow, Reason: v.Reason, Message: v.Message}
	}
	form := pkit.ForUser(choices, verdicts, "")
	kind, count, fallback := r.want(sv)
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
	if !r.mode.waitlist() || sv.joined {
		r.m.refusals++
		return
	}
	if p, ok = pick(kind, count, false); ok {
		c := bySlug[p.Slug]
		r.admit(sv, c.Resources, c.Override.NodeSelector, c.Slug, true)
	}
}

// groupForm is the choices one group sees, and what gpu-quota is asked about them.
type groupForm struct {
	choices []pkit.Choice
	bySlug  map[string]pkit.Choice
	opts    []qkit.AssessOption
}

// choices is gpu-profiles' choices for group from the catalog's kinds (Choices, then Visible), kept while the
// catalog's table stays the same: it is rebuilt, never changed in place, when a node or pod changes, and
// Choices and Visible depend on nothing else.
func (r *run) choices(kinds []pkit.KindStatus, group string) groupForm {
	if len(kinds) == 0 || &kinds[0] != r.formKinds {
		r.formKinds, r.forms = nil, map[string]groupForm{}
		if len(kinds) > 0 {
			r.formKinds = &kinds[0]
		}
	}
	if f, ok := r.forms[group]; ok {
		return f
	}
	f := groupForm{choices: pkit.Visible(pkit.Choices(kinds, r.env.Profiles), []string{group}), bySlug: map[string]pkit.Choice{}}
	for _, c := range f.choices {
		if c.Resources != nil {
			f.bySlug[c.Slug] = c
			f.opts = append(f.opts, qkit.AssessOption{ID: c.Slug, Resources: c.Resources, NodeSelector: c.Override.NodeSelector})
		}
	}
	r.forms[group] = f
	return f
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

// minLookback bounds the telemetry handed to Decide (minutes); a rule whose idle period, warning and snoozes
// add up to more gets that much (lookbackFor).
const minLookback = 4 * 60

// maxLookback bounds the walk back to an idle stretch's start (minutes): beyond any lookbackFor.
const maxLookback = 7 * 24 * 60

// lookbackFor is how far back the telemetry handed to Decide under rule goes (minutes): longer than its idle
// period plus its warning and every snooze, so that a stretch is never cut shorter than what Decide judges.
func lookbackFor(rule ckit.Rule) int {
	return max(minLookback, minutesOf(rule.IdlePeriod+rule.Warn+time.Duration(rule.MaxSnoozes)*rule.Snooze)+60)
}

// cullerPass is gpu-culler's pass: Decide for every running server on its own GPU telemetry, the notice
// kept as the pod would keep it, snoozes by users who have the tab open, and stops.
func (r *run) cullerPass() {
	now := clock(r.t)
	contended := map[string]bool{}
	if r.mode.waitlist() {
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
			Telemetry: r.telemetry(sv, rule)}
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

// rule is gpu-culler's resolved rule for a server of kind started with the choice slug.
func (r *run) rule(kind gpu.Kind, slug string) ckit.Rule {
	key := ruleKey{kind, slug}
	rule, ok := r.rules[key]
	if !ok {
		rule = r.env.Culler.Rule(kind, slug)
		r.rules[key] = rule
	}
	return rule
}

type ruleKey struct {
	kind gpu.Kind
	slug string
}

// telemetry is the server's GPU samples as the usage API would serve them: the newest alone while busy; while
// idle, back to the start of the idle stretch (at most lookbackFor the rule), memory unchanged. The usage API samples every
// minute; handed to Decide are the newest, the oldest of the stretch and one every staleAfter between them: the
// same idle stretch for Decide (no gap above staleAfter, utilization and memory unchanged), fewer to sort.
func (r *run) telemetry(sv *server, rule ckit.Rule) ckit.Telemetry {
	const memory = 4 << 30
	t := r.t
	if sv.s.Busy(t) {
		r.samples = append(r.samples[:0], ckit.Sample{At: clock(t), Utilization: r.env.Cfg.Idleness.BusyUtilization, MemoryBytes: memory})
		return ckit.Telemetry{Present: true, Samples: r.samples}
	}
	if sv.idleSeen != t-1 || sv.idleSeen == 0 {
		sv.idleFrom = t
		for sv.idleFrom > sv.started && !sv.s.Busy(sv.idleFrom-1) && sv.idleFrom > t-maxLookback {
			sv.idleFrom--
		}
	}
	sv.idleSeen = t
	from := max(sv.idleFrom, t-lookbackFor(rule), sv.started)
	step := max(1, int(rule.StaleAfter/time.Minute))
	r.samples = r.samples[:0]
	if (t-from)%step != 0 {
		r.samples = append(r.samples, ckit.Sample{At: clock(from), MemoryBytes: memory})
	}
	for i := from + (t-from)%step; i <= t; i += step {
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
// gpu-hours/decayed serves the waitlist). The maps are rewritten in place: the engine reads them only during
// a tick, and no user or class ever leaves the ledger.
func (r *run) refreshDecayed() {
	scale := math.Exp2(-float64(r.t) / r.halfLife)
	if r.decayed == nil {
		r.decayed = make(map[string]map[string]float64, len(r.ledger))
	}
	for u, byClass := range r.ledger {
		m := r.decayed[u]
		if m == nil {
			m = make(map[string]float64, len(byClass))
			r.decayed[u] = m
		}
		for c, v := range byClass {
			m[c] = v * scale
		}
	}
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
		if r.mode.rightSize() && sv.kind == gpu.KindGPU {
			sv.measured.HeldMin++
			if busy {
				sv.measured.BusyMin++
			}
			sv.measured.To = t
		}
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
		if r.mode.waitlist() {
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

// startRightSize draws who follows the advice and every user's intensity (seeded), and reads the offers.
func (r *run) startRightSize() {
	cfg := r.env.Cfg
	seed := strconv.FormatUint(cfg.Seed, 10)
	r.follows, r.advised, r.intensity = map[string]bool{}, map[string]bool{}, map[string]Intensity{}
	for _, u := range r.env.W.Users {
		r.follows[u] = float64(mixed(seed, "follow", u)>>11)/(1<<53) < cfg.RightSize.Follow
		r.intensity[u] = intensityOf(seed, u, cfg.RightSize.Fit, cfg.Capacity.Replicas)
	}
	r.offers = offersOf(r.cl)
}

// advise: a server of a user who follows the advice stops; the advice on its profile (held a whole GPU, one
// GPU asked) decides whether their next one-GPU sessions take a share.
func (r *run) advise(sv *server) {
	u := sv.s.User
	if !r.follows[u] || r.advised[u] || sv.kind != gpu.KindGPU || sv.s.GPUs != 1 || sv.measured.HeldMin == 0 {
		return
	}
	m := sv.measured
	m.From = m.To - m.HeldMin + 1
	a, take := followAdvice(profileOf(u, sv.s.Pod, heldOffer(sv.res, sv.node), r.intensity[u], m), r.offers, clock(r.t))
	r.m.advice[a.Verdict]++
	if take {
		r.advised[u] = true
	}
}
