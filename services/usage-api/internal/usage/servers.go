package usage

import (
	"slices"
	"strings"

	"github.com/gpuhub/gpuhub/services/internal/contract"
)

// Telemetry is contract.Telemetry: the usage API's wire type, kept in one place for its consumers.
type Telemetry = contract.Telemetry

// Telemetry lists every running Hub server of the view that holds GPUs, sorted by user then server. It only
// reads the view: the caller may keep the result for as long as the view is the latest.
func (v *View) Telemetry() []Telemetry {
	n := 0
	for _, u := range v.Users {
		n += len(u.Servers)
	}
	out := make([]Telemetry, 0, n)
	for _, u := range v.Users {
		for _, s := range u.Servers {
			out = append(out, serverTelemetry(u.Name, s))
		}
	}
	slices.SortFunc(out, func(a, b Telemetry) int {
		if c := strings.Compare(a.User, b.User); c != 0 {
			return c
		}
		return strings.Compare(a.Server, b.Server)
	})
	return out
}

func serverTelemetry(user string, s Server) Telemetry {
	t := Telemetry{User: user, Server: s.Name, Pod: s.Pod, Namespace: s.Namespace, Node: s.Node,
		AllocatedGPUs: s.AllocatedGPUs, Stale: s.Stale, StaleReason: s.StaleReason, Simulated: s.Simulated}
	if len(s.GPUs) > 0 {
		t.Kind, t.Class = s.GPUs[0].Kind, s.GPUs[0].Class
	}
	var util float64
	known := true
	for _, g := range s.GPUs {
		t.MemoryUsedBytes += g.MemoryUsedBytes
		switch {
		case g.SMUtilPercent == nil && known:
			known, t.UtilizationUnknownReason = false, g.UtilizationUnknownReason
		case g.SMUtilPercent != nil:
			util = max(util, *g.SMUtilPercent)
		}
	}
	if s.Stale {
		known = false
		if t.UtilizationUnknownReason == "" {
			t.UtilizationUnknownReason = s.StaleReason
		}
	}
	if known && len(s.GPUs) > 0 {
		t.SMUtilPercent = &util
	}
	if t.SMUtilPercent == nil && t.UtilizationUnknownReason == "" {
		t.UtilizationUnknownReason = "the usage API has no utilization for this server"
	}
	return t
}
