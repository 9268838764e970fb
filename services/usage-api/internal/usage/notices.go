package usage

import (
	corev1 "k8s.io/api/core/v1"

	"slices"
	"strings"

	"github.com/gpuhub/gpuhub/services/internal/contract"
	"github.com/gpuhub/gpuhub/services/internal/inventory"
	"github.com/gpuhub/gpuhub/services/internal/notice"
)

// Notice is contract.Notice: the usage API's wire type, kept in one place for its consumers.
type Notice = contract.Notice

// notices collects the pending notices of each user from their live pods (pending or running; not finished
// pods, which no service looks at again, nor those being deleted, whose server is stopping already), one per
// service: the one with the earliest deadline (a notice without one
// last), then by server name. Values that are not notices are skipped.
func notices(pods []inventory.Pod) map[string][]Notice {
	out := map[string][]Notice{}
	for _, p := range pods {
		if p.User == "" || p.Terminating || len(p.Notices) == 0 || p.Phase == corev1.PodSucceeded || p.Phase == corev1.PodFailed {
			continue
		}
		ns, _ := notice.Parse(p.Notices)
		for _, n := range ns {
			cand := Notice{Notice: n, Server: p.Server}
			list := out[p.User]
			i := slices.IndexFunc(list, func(o Notice) bool { return o.Service == n.Service })
			switch {
			case i < 0:
				out[p.User] = append(list, cand)
			case before(cand, list[i]):
				list[i] = cand
			}
		}
	}
	for _, list := range out {
		slices.SortFunc(list, func(a, b Notice) int { return strings.Compare(a.Service, b.Service) })
	}
	return out
}

// before orders two notices of one service: the earliest deadline first, no deadline last, then by server.
func before(a, b Notice) bool {
	switch {
	case a.Deadline.IsZero() != b.Deadline.IsZero():
		return !a.Deadline.IsZero()
	case !a.Deadline.Equal(b.Deadline):
		return a.Deadline.Before(b.Deadline)
	}
	return a.Server < b.Server
}
