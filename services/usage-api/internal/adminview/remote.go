package adminview

import (
	"cmp"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpuhub/gpuhub/services/internal/contract"
	"github.com/gpuhub/gpuhub/services/internal/decision"
	"github.com/gpuhub/gpuhub/services/internal/gpu"
)

// source is one remote section's state: Problem says in words why it shows nothing (not configured, down,
// refusing), and what to do.
type source struct {
	Service string
	Problem string
}

// notConfigured says how to configure a service the usage API was not given.
var notConfigured = map[string]string{
	"gpu-culler": "gpu-culler is not configured: start the usage API with --culler-url (GPUHUB_CULLER_URL; the chart sets it when culler.enabled).",
	"gpu-quota":  "gpu-quota is not configured: start the usage API with --quota-url (GPUHUB_QUOTA_URL; the chart sets it when quota.enabled).",
}

// decisionQueries are what the page shows of each service: the culler's stops (culls), warnings and snoozes;
// gpu-quota's refusals and stops (over a budget or a lowered limit). One request per action, so that gpu-quota's
// many admissions never crowd them out.
var decisionQueries = []struct {
	service string
	actions []string
}{
	{"gpu-culler", []string{decision.ActionStop, decision.ActionNotice, decision.ActionSnooze}},
	{"gpu-quota", []string{decision.ActionDeny, decision.ActionStop}},
}

// decisionLimit is how many decisions of each action and service are asked for; maxDecisions how many are shown.
const (
	decisionLimit = 100
	maxDecisions  = 300
)

type decisionsContent struct {
	Sources []source
	Rows    []decisionRow
	Shown   int
	Total   int
}

type decisionRow struct {
	decision.Record
	What    string
	Numbers string
}

var actionWords = map[string]map[string]string{
	"gpu-culler": {decision.ActionStop: "culled (stopped)", decision.ActionNotice: "warned", decision.ActionSnooze: "snoozed"},
	"gpu-quota":  {decision.ActionDeny: "refused a spawn", decision.ActionStop: "stopped (over budget or limit)"},
}

func (h *handler) remote(service string) Remote {
	if service == "gpu-culler" {
		return h.o.Culler
	}
	return h.o.Quota
}

func (h *handler) decisions(w http.ResponseWriter, r *http.Request) {
	type result struct {
		service string
		recs    []decision.Record
		err     error
	}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		results []result
	)
	c := decisionsContent{}
	for _, dq := range decisionQueries {
		rem := h.remote(dq.service)
		if rem == nil {
			c.Sources = append(c.Sources, source{Service: dq.service, Problem: notConfigured[dq.service]})
			continue
		}
		c.Sources = append(c.Sources, source{Service: dq.service})
		for _, action := range dq.actions {
			wg.Go(func() {
				recs, err := fetchDecisions(r.Context(), rem, action)
				mu.Lock()
				results = append(results, result{service: dq.service, recs: recs, err: err})
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, res := range results {
		if res.err != nil {
			for i := range c.Sources {
				if c.Sources[i].Service == res.service && c.Sources[i].Problem == "" {
					c.Sources[i].Problem = res.err.Error()
				}
			}
			continue
		}
		for _, rec := range res.recs {
			key := res.service + "\x00" + rec.ID
			if seen[key] {
				continue
			}
			seen[key] = true
			if rec.Service == "" {
				rec.Service = res.service
			}
			what := actionWords[res.service][rec.Action]
			if what == "" {
				what = rec.Action
			}
			c.Rows = append(c.Rows, decisionRow{Record: rec, What: what, Numbers: numbers(rec.Numbers)})
		}
	}
	slices.SortFunc(c.Rows, func(a, b decisionRow) int {
		return cmp.Or(b.Time.Compare(a.Time), strings.Compare(a.Service, b.Service), strings.Compare(a.ID, b.ID))
	})
	c.Total = len(c.Rows)
	if len(c.Rows) > maxDecisions {
		c.Rows = c.Rows[:maxDecisions]
	}
	c.Shown = len(c.Rows)
	h.render(w, r, http.StatusOK, "decisions", h.newPage(r, "Recent decisions", h.o.Prefix+"decisions", c))
}

func fetchDecisions(ctx context.Context, rem Remote, action string) ([]decision.Record, error) {
	body, err := rem.Get(ctx, "api/v1/decisions?action="+action+"&limit="+itoa(decisionLimit))
	if err != nil {
		return nil, err
	}
	var list decision.List
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, errBadAnswer("decisions")
	}
	return list.Decisions, nil
}

type badAnswer string

func (e badAnswer) Error() string {
	return "the answer about " + string(e) + " was not understood; the usage API and the service may be of different gpuhub versions"
}

func errBadAnswer(what string) error { return badAnswer(what) }

// numbers writes a decision's numbers as "key=value" pairs in key order.
func numbers(m map[string]float64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+"="+ftoa(m[k]))
	}
	return strings.Join(parts, ", ")
}

type queue struct {
	Class       string
	Kind        gpu.Kind
	Description string
	Waiting     int
	Places      []contract.Place
}

type waitlistContent struct {
	Source source
	Queues []queue
	AsOf   time.Time
}

func (h *handler) waitlist(w http.ResponseWriter, r *http.Request) {
	c := waitlistContent{Source: source{Service: "gpu-quota"}, AsOf: h.o.Now().UTC()}
	if h.o.Quota == nil {
		c.Source.Problem = notConfigured["gpu-quota"]
	} else if body, err := h.o.Quota.Get(r.Context(), "api/v1/waitlist"); err != nil {
		c.Source.Problem = err.Error()
	} else {
		var ans contract.Places
		if err := json.Unmarshal(body, &ans); err != nil {
			c.Source.Problem = errBadAnswer("the waitlist").Error()
		}
		c.Queues = queues(ans.Places)
	}
	h.render(w, r, http.StatusOK, "waitlist", h.newPage(r, "Waitlists", h.o.Prefix+"waitlist", c))
}

// queues groups places by class: held turns first, then in line order, then servers started from the queue.
func queues(ps []contract.Place) []queue {
	idx := map[string]int{}
	var out []queue
	for _, p := range ps {
		i, ok := idx[p.Class]
		if !ok {
			i = len(out)
			idx[p.Class] = i
			out = append(out, queue{Class: p.Class, Kind: p.Kind, Description: p.Description})
		}
		if p.State == "waiting" {
			out[i].Waiting++
		}
		out[i].Places = append(out[i].Places, p)
	}
	rank := map[string]int{"held": 0, "waiting": 1, "started": 2}
	for _, q := range out {
		slices.SortStableFunc(q.Places, func(a, b contract.Place) int {
			return cmp.Or(cmp.Compare(rank[a.State], rank[b.State]), cmp.Compare(a.Position, b.Position), a.JoinedAt.Compare(b.JoinedAt))
		})
	}
	slices.SortFunc(out, func(a, b queue) int { return strings.Compare(a.Class, b.Class) })
	return out
}
