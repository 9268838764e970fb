package admit

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/quota"
	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/waitlist"
	"github.com/gpuhub/gpuhub/services/internal/gpu"
)

// noneFreeMessage tells the user that no GPU of the class they asked for is free (never who holds them), why
// when nodes of the class take no new servers (blocked: inventory.BlockedWords, as gpu-profiles says it), and
// what is free now within their quota: "No H100 is free right now: gpu-h100-0 is cordoned. Free now and within
// your quota: two time-sliced shares of a T4. Pick one of those profiles, or try again later."
func noneFreeMessage(asked gpu.Allocation, free int64, blocked string, canTake []Option) string {
	var b strings.Builder
	name := unitName(asked)
	switch {
	case free == 0 && blocked != "":
		fmt.Fprintf(&b, "No %s is free right now: %s.", name, blocked)
	case free == 0:
		fmt.Fprintf(&b, "No %s is free right now.", name)
	default:
		one := asked
		one.Count = free
		fmt.Fprintf(&b, "Only %s %s free right now", one.Units(), isAre(free))
		if blocked != "" {
			fmt.Fprintf(&b, " (%s)", blocked)
		}
		fmt.Fprintf(&b, " and this server asks for %s.", asked.Units())
	}
	if len(canTake) == 0 {
		b.WriteString(" No other GPU is free within your quota either: try again later, or pick a CPU-only profile.")
		return b.String()
	}
	b.WriteString(freeWithinQuota(canTake))
	b.WriteString(" Pick one of those profiles, or try again later.")
	return b.String()
}

// maxNoneFree bounds the cache of none_free texts (index.noneFree).
const maxNoneFree = 1024

// noneFreeMessageLocked is noneFreeMessage through the index's cache of them. It stays right while the nodes do
// not change (the cache is cleared when they do): the text is made of the class asked for, how many units are
// asked and free, the blocked nodes' words, and each class one can take with its free count, all in the key.
func (ix *index) noneFreeMessageLocked(asked gpu.Allocation, askedClass string, free int64, blocked string, canTake []Option) string {
	var buf [256]byte
	key := append(buf[:0], askedClass...)
	key = append(key, '|')
	key = strconv.AppendInt(key, asked.Count, 10)
	key = append(key, '|')
	key = strconv.AppendInt(key, free, 10)
	key = append(key, '|')
	key = append(key, blocked...)
	for _, o := range canTake {
		key = append(key, '|')
		key = append(key, o.Class...)
		key = append(key, '=')
		key = strconv.AppendInt(key, o.Free, 10)
	}
	if msg, ok := ix.noneFree[string(key)]; ok {
		return msg
	}
	msg := noneFreeMessage(asked, free, blocked, canTake)
	if len(ix.noneFree) >= maxNoneFree {
		clear(ix.noneFree)
	}
	ix.noneFree[string(key)] = msg
	return msg
}

// unitName names one unit of an allocation without a count: "H100" for a whole GPU, "MIG 3g.20gb slice on an
// A100", "time-sliced share of a T4".
func unitName(a gpu.Allocation) string {
	if a.Kind == gpu.KindGPU {
		p := gpu.ShortProduct(a.Product)
		if i := strings.IndexByte(p, '-'); i > 0 {
			p = p[:i]
		}
		if p == "" || p == "unknown" {
			return "whole GPU of this kind"
		}
		return p
	}
	one := a
	one.Count = 1
	return strings.TrimPrefix(one.Units(), "one ")
}

func isAre(n int64) string {
	if n == 1 {
		return "is"
	}
	return "are"
}

// waitlistMessage refuses a request whose units are free on the nodes but held for (held), or owed to (ahead),
// people on the waitlist.
func waitlistMessage(asked gpu.Allocation, held, ahead int64, joining bool) string {
	name := unitName(asked)
	var b strings.Builder
	switch {
	case held > 0 && ahead > 0:
		fmt.Fprintf(&b, "The free %s is held for the next person on the waitlist, and %d more %s waiting.", name, ahead, personPeople(ahead))
	case held > 0:
		fmt.Fprintf(&b, "The free %s is held for the next person on the waitlist.", name)
	default:
		fmt.Fprintf(&b, "Every free %s goes to the people on the waitlist first: %d %s waiting.", name, ahead, personPeople(ahead))
	}
	if !joining {
		fmt.Fprintf(&b, " You would be number %d in line: choose \"join the waitlist\" on the spawn form to keep a place.", ahead+1)
	}
	return b.String()
}

func personPeople(n int64) string {
	if n == 1 {
		return "person is"
	}
	return "people are"
}

// joinedMessage answers a spawn that joined the waitlist: the place first, then what is free instead.
func joinedMessage(p Place, canTake []Option) string {
	var b strings.Builder
	b.WriteString("You joined the waitlist. ")
	b.WriteString(p.Message)
	if len(canTake) > 0 {
		fmt.Fprintf(&b, " Free now instead, within your quota: %s.", freeUnits(canTake))
	}
	return b.String()
}

// freeWithinQuota is what the user could start instead ("Free now and within your quota: two MIG 3g.20gb slices
// on an A100."), at the end of a none_free refusal and of a policy refusal. Only at spawn: assess's verdicts,
// shown on the form beside the free counts, leave it out.
func freeWithinQuota(canTake []Option) string {
	return " Free now and within your quota: " + freeUnits(canTake) + "."
}

// freeUnits names what canTake offers with its free counts: "two MIG 3g.20gb slices on an A100 and ...".
func freeUnits(canTake []Option) string {
	units := make([]gpu.Allocation, len(canTake))
	for i, o := range canTake {
		units[i] = o.unit
		units[i].Count = o.Free
	}
	return gpu.JoinUnits(units)
}

// serversWaitingMessage refuses a join that would make the user's GPU servers, running and waiting, more than
// their maxServers (limit, from): "You already run 1 GPU server and wait for 1 GPU server on the waitlist; each
// user may run at most 2 GPU servers at a time. Take one of them off the waitlist to wait for this one instead."
func serversWaitingMessage(running, waiting, limit int, from quota.Source) string {
	var b strings.Builder
	b.WriteString("You already ")
	if running > 0 {
		fmt.Fprintf(&b, "run %s and ", quota.GPUServers(running))
	}
	fmt.Fprintf(&b, "wait for %s on the waitlist; %s may run at most %s at a time.", quota.GPUServers(waiting), quota.Who(from), quota.GPUServers(limit))
	if waiting > 0 {
		b.WriteString(" Take one of them off the waitlist to wait for this one instead.")
	} else {
		b.WriteString(" Stop one of your GPU servers to wait for this one.")
	}
	return b.String()
}

// heldForOthersMessage says why an entry is passed over while units are held for the user's other entries
// (held) that their quota does not let this one join: shown after "For now you cannot be served: ".
func heldForOthersMessage(held []waitlist.Entry) string {
	names := make([]string, len(held))
	for i, en := range held {
		names[i] = strconv.Quote(en.Server)
		if en.Server == "" {
			names[i] = "default"
		}
	}
	if len(held) == 1 {
		srv := "server " + names[0]
		if held[0].Server == "" {
			srv = "default server"
		}
		return fmt.Sprintf("Your turn came for your %s (%s is held for it), and your quota does not cover this server as well: "+
			"start that one, or take it off the waitlist.", srv, gpu.WithArticle(entryName(held[0])))
	}
	return fmt.Sprintf("Your turn came for your servers %s (a unit is held for each), and your quota does not cover this server "+
		"as well: start those, or take them off the waitlist.", quota.JoinAnd(names))
}
