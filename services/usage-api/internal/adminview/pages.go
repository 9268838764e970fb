package adminview

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/gpuhub/gpuhub/hubapi/huboauth"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/usage"
)

// classRow is one GPU class of the inventory. Units are what pods request (a whole GPU, a MIG instance, a
// time-sliced replica); the other numbers are GPU-equivalents, as api/v1/cluster reports them.
type classRow struct {
	Kind, Class                      string
	UnitsTotal, UnitsHeld, UnitsFree int64
	// Total is capacityGPUs, Held allocatedGPUs, Busy usedGPUs (the known part), Unknown usedUnknownGPUs,
	// Idle held minus busy minus unknown (never below 0), Free total minus held.
	Total, Held, Busy, Unknown, Idle, Free float64
	Util                                   *float64
}

func (r *classRow) fill() {
	r.UnitsFree = r.UnitsTotal - r.UnitsHeld
	r.Idle = max(0, r.Held-r.Busy-r.Unknown)
	r.Free = max(0, r.Total-r.Held)
}

type inventoryContent struct {
	NoView  bool
	Classes []classRow
	Total   classRow
	Users   int
	Nodes   int
	Agents  int
	Stale   []usage.AgentStatus
}

func (h *handler) inventory(w http.ResponseWriter, r *http.Request) {
	c := inventoryContent{}
	v := h.o.State.View()
	if v == nil {
		c.NoView = true
	} else {
		cl := v.Cluster
		c.Users, c.Nodes, c.Agents = len(v.Users), cl.Nodes, cl.Agents
		for _, s := range cl.Classes {
			row := classRow{Kind: string(s.Kind), Class: s.Class, UnitsTotal: s.CapacityUnits, UnitsHeld: s.AllocatedUnits,
				Total: s.CapacityGPUs, Held: s.AllocatedGPUs, Busy: s.UsedGPUs, Unknown: s.UsedUnknownGPUs, Util: s.SMUtilPercent}
			row.fill()
			c.Classes = append(c.Classes, row)
		}
		slices.SortFunc(c.Classes, func(a, b classRow) int {
			return cmp.Or(strings.Compare(a.Kind, b.Kind), strings.Compare(a.Class, b.Class))
		})
		c.Total = classRow{Class: "All GPUs", Total: cl.CapacityGPUs, Held: cl.AllocatedGPUs, Busy: cl.UsedGPUs, Unknown: cl.UsedUnknownGPUs}
		for _, row := range c.Classes {
			c.Total.UnitsTotal += row.UnitsTotal
			c.Total.UnitsHeld += row.UnitsHeld
		}
		c.Total.fill()
		for _, a := range cl.AgentStatus {
			if a.Stale {
				c.Stale = append(c.Stale, a)
			}
		}
	}
	h.render(w, r, http.StatusOK, "inventory", h.newPage(r, "GPU inventory", h.o.Prefix, c))
}

// idleBelow is the utilization under which a GPU counts as idle on the holders page (the usage API's one rule).
const idleBelow = usage.IdleBelowPercent

// idleTime is how long a server's GPUs have been idle, from the usage API's in-memory history (the last hour at
// the sampling interval), which it keeps per user.
type idleTime struct {
	D       time.Duration
	Known   bool
	AtLeast bool // idle for all of the history kept: at least D
	Busy    bool
	Why     string // when not Known
}

func (t idleTime) String() string {
	switch {
	case !t.Known:
		return "unknown"
	case t.Busy:
		return "busy now"
	case t.AtLeast:
		return "at least " + ago(t.D)
	default:
		return ago(t.D)
	}
}

// userIdle derives how long a user's GPUs have all been idle (utilization below idleBelow) from their history:
// the time since the first idle sample after their last busy one, or since their oldest sample (at least) when
// all are idle. A sample whose utilization is unknown ends the run.
func userIdle(ps usage.Points, asOf time.Time) idleTime {
	if len(ps) == 0 {
		return idleTime{Why: "no history yet"}
	}
	newest := ps[len(ps)-1]
	if !newest.UsedKnown {
		return idleTime{Why: "utilization unknown now"}
	}
	if newest.SMUtilPercent >= idleBelow {
		return idleTime{Known: true, Busy: true}
	}
	since, atLeast := newest.T, true
	for i := len(ps) - 1; i >= 0; i-- {
		p := ps[i]
		if !p.UsedKnown || p.SMUtilPercent >= idleBelow {
			atLeast = !p.UsedKnown
			break
		}
		since = p.T
	}
	return idleTime{Known: true, D: max(0, asOf.Sub(since)), AtLeast: atLeast}
}

type holderRow struct {
	User, UserHref, Server, Pod, Node, Kind, Class string
	Allocated                                      float64
	Util                                           *float64
	UtilWhy                                        string
	Idle                                           idleTime
	Stale                                          bool
}

type column struct {
	Key, Label string
	Href       string
	AriaSort   string // "ascending", "descending" or "" (not sorted by it)
	Numeric    bool
}

type holdersContent struct {
	NoView  bool
	Columns []column
	Rows    []holderRow
	Sort    string
	Dir     string
	Caption string
}

var holderColumns = []struct {
	key, label string
	numeric    bool
}{
	{"user", "User", false}, {"server", "Server", false}, {"node", "Node", false}, {"kind", "Kind", false},
	{"allocated", "Allocated (GPUs)", true}, {"util", "Utilization", true}, {"idle", "Idle for", true},
}

// holders lists every running GPU server, sortable by column (sort, dir); unknown values sort last either way.
func (h *handler) holders(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	key, dir := q.Get("sort"), q.Get("dir")
	if key == "" {
		key = "user"
	}
	valid := false
	for _, c := range holderColumns {
		valid = valid || c.key == key
	}
	if !valid {
		h.fail(w, r, http.StatusBadRequest, fmt.Sprintf("sort %q is not a column: use user, server, node, kind, allocated, util or idle.", param(key)))
		return
	}
	if dir == "" {
		dir = "asc"
	}
	if dir != "asc" && dir != "desc" {
		h.fail(w, r, http.StatusBadRequest, fmt.Sprintf("dir %q is not asc or desc.", param(dir)))
		return
	}
	c := holdersContent{Sort: key, Dir: dir}
	for _, col := range holderColumns {
		next := "asc"
		if col.numeric {
			next = "desc" // the biggest first is what one looks for
		}
		cc := column{Key: col.key, Label: col.label, Numeric: col.numeric}
		if col.key == key {
			cc.AriaSort = map[string]string{"asc": "ascending", "desc": "descending"}[dir]
			next = map[string]string{"asc": "desc", "desc": "asc"}[dir]
		}
		cc.Href = h.o.Prefix + "holders?" + url.Values{"sort": {col.key}, "dir": {next}}.Encode()
		c.Columns = append(c.Columns, cc)
	}
	v := h.o.State.View()
	if v == nil {
		c.NoView = true
		h.render(w, r, http.StatusOK, "holders", h.newPage(r, "Who holds what", h.o.Prefix+"holders", c))
		return
	}
	idle := map[string]idleTime{}
	for _, t := range v.Telemetry() {
		row := holderRow{User: t.User, UserHref: h.o.Prefix + "users/" + url.PathEscape(t.User), Server: t.Server, Pod: t.Pod,
			Node: t.Node, Kind: string(t.Kind), Class: t.Class, Allocated: t.AllocatedGPUs, Util: t.SMUtilPercent,
			UtilWhy: t.UtilizationUnknownReason, Stale: t.Stale}
		ui, ok := idle[t.User]
		if !ok {
			ui = userIdle(h.o.State.History.User(t.User, time.Time{}), v.SampledAt)
			idle[t.User] = ui
		}
		switch {
		case t.SMUtilPercent == nil:
			row.Idle = idleTime{Why: "utilization unknown"}
		case *t.SMUtilPercent >= idleBelow:
			row.Idle = idleTime{Known: true, Busy: true}
		case ui.Known && ui.Busy:
			// The history is per user: another of this user's servers is busy, so this one's idle time is unknown.
			row.Idle = idleTime{Why: "another server of this user is busy; idle time is kept per user"}
		default:
			row.Idle = ui
		}
		c.Rows = append(c.Rows, row)
	}
	sortHolders(c.Rows, key, dir == "desc")
	c.Caption = fmt.Sprintf("%d running GPU servers, sorted by %s (%s)", len(c.Rows), strings.ToLower(columnLabel(key)),
		map[string]string{"asc": "ascending", "desc": "descending"}[dir])
	h.render(w, r, http.StatusOK, "holders", h.newPage(r, "Who holds what", h.o.Prefix+"holders", c))
}

func columnLabel(key string) string {
	for _, c := range holderColumns {
		if c.key == key {
			return c.label
		}
	}
	return key
}

func sortHolders(rows []holderRow, key string, desc bool) {
	slices.SortStableFunc(rows, func(a, b holderRow) int {
		var c int
		unknownA, unknownB := false, false
		switch key {
		case "user":
			c = strings.Compare(a.User, b.User)
		case "server":
			c = strings.Compare(a.Server, b.Server)
		case "node":
			c = strings.Compare(a.Node, b.Node)
		case "kind":
			c = cmp.Or(strings.Compare(a.Kind, b.Kind), strings.Compare(a.Class, b.Class))
		case "allocated":
			c = cmp.Compare(a.Allocated, b.Allocated)
		case "util":
			unknownA, unknownB = a.Util == nil, b.Util == nil
			if !unknownA && !unknownB {
				c = cmp.Compare(*a.Util, *b.Util)
			}
		case "idle":
			unknownA, unknownB = !a.Idle.Known, !b.Idle.Known
			if !unknownA && !unknownB {
				c = cmp.Compare(idleKey(a.Idle), idleKey(b.Idle))
			}
		}
		switch {
		case unknownA != unknownB: // unknown last, whatever the direction
			if unknownA {
				return 1
			}
			return -1
		case c != 0:
			if desc {
				return -c
			}
			return c
		}
		return cmp.Or(strings.Compare(a.User, b.User), strings.Compare(a.Server, b.Server), strings.Compare(a.Pod, b.Pod))
	})
}

// idleKey orders idle times: busy first, then by duration (at least D counts as a little more than D).
func idleKey(t idleTime) time.Duration {
	if t.Busy {
		return -1
	}
	if t.AtLeast {
		return t.D + time.Nanosecond
	}
	return t.D
}

type windowRow struct {
	Window                         window
	Allocated, Used, Unknown, Idle float64
}

type userContent struct {
	Name        string
	Self        bool
	Known       bool // in the Hub's directory or holding GPUs
	Groups      []string
	Share       usage.Share
	Servers     []usage.Server
	Stale       bool
	StaleReason string
	Hours       []windowRow
	Unavailable string
}

// renderUser is one user's page: their live GPU servers and their GPU-hours over 24 h, 7 d and 30 d. The caller
// has checked that s may see it.
func (h *handler) renderUser(w http.ResponseWriter, r *http.Request, s huboauth.Session, name string) {
	c := userContent{Name: name, Self: name == s.User}
	if v := h.o.State.View(); v != nil {
		hu, inHub := v.Hub.Users[name]
		c.Groups = hu.Groups
		if u := v.Users[name]; u != nil {
			c.Known = true
			c.Share, c.Servers, c.Stale, c.StaleReason = u.Share, u.Servers, u.Stale, u.StaleReason
			if c.Groups == nil {
				c.Groups = u.Groups
			}
		}
		c.Known = c.Known || inHub || c.Self
	}
	err := h.o.Ledger.Available()
	if err == nil {
		asOf := h.asOf()
		for _, rw := range rollingWindows {
			win, _ := rolling(rw.name, asOf)
			rows, qerr := h.rows(r.Context(), win, name)
			if qerr != nil {
				h.o.Logger.Error("admin view: ledger query failed", "user", name, "window", win.Name, "err", qerr)
				err = errors.New("the ledger database did not answer just now; reload the page in a few seconds")
				break
			}
			var sum hoursRow
			for _, row := range rows {
				sum.add(row)
			}
			c.Hours = append(c.Hours, windowRow{Window: win, Allocated: sum.Allocated, Used: sum.Used, Unknown: sum.Unknown, Idle: sum.Idle})
		}
	}
	if err != nil {
		c.Hours, c.Unavailable = nil, "GPU-hours are unavailable: "+err.Error()+". The live numbers above are current."
	}
	title := "GPU use of " + name
	if c.Self {
		title = "Your GPUs"
	}
	current := h.o.Prefix + "users/" + url.PathEscape(name)
	if !s.Admin && r.URL.Path == h.o.Prefix {
		current = h.o.Prefix + "users/" + url.PathEscape(s.User)
	}
	h.render(w, r, http.StatusOK, "user", h.newPage(r, title, current, c))
}
