package admit

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/waitlist"
)

// TestWaitlistHoldsWithinQuota: a user waiting with several servers gets a unit held only as far as their quota
// takes it with what is already held for them. dave (maxGPUs 1) waits with x1, x2 and x3, frank after him; two
// H100s free: one is held for dave's x1, the other for frank, and dave's other servers wait (shown as blocked)
// instead of keeping units from frank that dave could not use.
func TestWaitlistHoldsWithinQuota(t *testing.T) {
	r := newWaitRig(t, &decayedTable{m: map[string]map[string]float64{}})
	r.pol.Store(mustPolicy(t, "default:\n  maxGPUs: 1\n  maxServers: 4\n"))
	r.create(t, h100Pod("carol-1", "carol", "", t0.Add(-time.Hour)))
	r.create(t, h100Pod("carol-2", "carol", "two", t0.Add(-time.Hour)))
	for _, req := range []Request{h100("dave", "x1", 1), h100("dave", "x2", 1), h100("dave", "x3", 1), h100("frank", "", 1)} {
		r.clock.Add(time.Second)
		if _, err := r.eng.Join(req); err != nil {
			t.Fatalf("%s/%s: %v", req.User, req.Server, err)
		}
	}
	r.remove(t, "carol-1")
	r.remove(t, "carol-2")
	tick := r.eng.WaitlistTick(r.clock.Now())
	var held []string
	for _, h := range tick.Held {
		held = append(held, h.User+"/"+h.Server)
	}
	if diff := cmp.Diff([]string{"dave/x1", "frank/"}, held); diff != "" {
		t.Errorf("held (-want +got):\n%s", diff)
	}
	r.eng.WaitlistTick(r.clock.Now())
	if diff := cmp.Diff([]string{"dave:0", "frank:0", "dave:1(blocked)", "dave:2(blocked)"}, places(t, r)); diff != "" {
		t.Errorf("places (-want +got):\n%s", diff)
	}
	ps, err := r.eng.Places("dave")
	if err != nil {
		t.Fatal(err)
	}
	const blocked = `Your turn came for your server "x1" (an H100 is held for it), and your quota does not cover this server as well: ` +
		`start that one, or take it off the waitlist.`
	if len(ps) != 3 || ps[1].Blocked != blocked {
		t.Errorf("dave's x2: %+v, want blocked: %s", ps, blocked)
	}
	if res := r.admit(t, h100("frank", "", 1)); !res.Allow {
		t.Errorf("frank on his hold: %s %s", res.Reason, res.Message)
	}
	if res := r.admit(t, h100("dave", "x1", 1)); !res.Allow {
		t.Errorf("dave's x1 on its hold: %s %s", res.Reason, res.Message)
	}
}

// joinsPolicy: two GPUs and two GPU servers each; admin is exempt (no server limit).
const joinsPolicy = `
default:
  maxGPUs: 2
  maxServers: 2
users:
  admin: {exempt: true}
`

// TestWaitlistJoinsWithinMaxServers: a user's GPU servers, running and waiting, stay within maxServers; one with
// no server limit has at most maxEntriesPerUser entries.
func TestWaitlistJoinsWithinMaxServers(t *testing.T) {
	type join struct {
		req   Request
		admit bool // through an admission that joins, not Engine.Join
	}
	many := func(user string, n int) []join {
		var out []join
		for i := range n {
			out = append(out, join{req: h100(user, fmt.Sprintf("s%d", i), 1)})
		}
		return out
	}
	const full = "You already wait for 2 GPU servers on the waitlist; each user may run at most 2 GPU servers at a time. " +
		"Take one of them off the waitlist to wait for this one instead."
	tests := map[string]struct {
		pods  []*corev1.Pod
		joins []join
		want  []string // per join: "joined", or the refusal's message
	}{
		"two entries within maxServers 2, the third refused": {
			joins: []join{{req: h100("dave", "x1", 1)}, {req: h100("dave", "x2", 1)}, {req: h100("dave", "x3", 1)}},
			want:  []string{"joined", "joined", full},
		},
		"a running server counts": {
			pods:  []*corev1.Pod{pod("dave-m", "dave", "m", "gpu-a100", "nvidia.com/mig-3g.20gb")},
			joins: []join{{req: h100("dave", "x1", 1)}, {req: h100("dave", "x2", 1)}},
			want: []string{"joined", "You already run 1 GPU server and wait for 1 GPU server on the waitlist; each user may run at most " +
				"2 GPU servers at a time. Take one of them off the waitlist to wait for this one instead."},
		},
		"joining again for a server already waiting replaces its entry": {
			joins: []join{{req: h100("dave", "x1", 1)}, {req: h100("dave", "x2", 1)}, {req: h100("dave", "x1", 1)}},
			want:  []string{"joined", "joined", "joined"},
		},
		"an admission that joins is bounded too": {
			joins: []join{{req: h100("dave", "x1", 1)}, {req: h100("dave", "x2", 1)}, {req: joining(h100("dave", "x3", 1), false), admit: true}},
			want: []string{"joined", "joined", "No H100 is free right now. Free now and within your quota: three MIG 1g.5gb slices on an A100, " +
				"two MIG 3g.20gb slices on an A100 and four time-sliced shares of a T4. Pick one of those profiles, or try again later. The waitlist could not take you: " + full},
		},
		"no server limit: at most maxEntriesPerUser entries": {
			joins: many("admin", maxEntriesPerUser+1),
			want: append(strings.Split(strings.Repeat("joined,", maxEntriesPerUser), ",")[:maxEntriesPerUser],
				fmt.Sprintf("You already wait for %d servers on the waitlist, the most one user may. "+
					"Take one of them off the waitlist to wait for this one instead.", maxEntriesPerUser)),
		},
	}
	for _, name := range sortedNames(tests) {
		tc := tests[name]
		t.Run(name, func(t *testing.T) {
			r := newWaitRig(t, &decayedTable{m: map[string]map[string]float64{}})
			r.pol.Store(mustPolicy(t, joinsPolicy))
			r.create(t, h100Pod("carol-1", "carol", "", t0.Add(-time.Hour)))
			r.create(t, h100Pod("carol-2", "carol", "two", t0.Add(-time.Hour)))
			for _, p := range tc.pods {
				r.create(t, p)
			}
			var got []string
			for _, j := range tc.joins {
				r.clock.Add(time.Second)
				if j.admit {
					res := r.admit(t, j.req)
					if res.Waitlist != nil {
						got = append(got, "joined")
					} else {
						got = append(got, res.Message)
					}
					continue
				}
				_, err := r.eng.Join(j.req)
				var je *JoinError
				switch {
				case err == nil:
					got = append(got, "joined")
				case errors.As(err, &je):
					got = append(got, je.Message)
				default:
					t.Fatalf("join %+v: %v", j.req, err)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestWaitlistUserOptionsBound: the spawn form's options kept with an entry are bounded, whether it joins through
// the API or through an admission; an admission that does not join is not affected by their size.
func TestWaitlistUserOptionsBound(t *testing.T) {
	r := newWaitRig(t, &decayedTable{m: map[string]map[string]float64{}})
	r.create(t, h100Pod("carol-1", "carol", "", t0.Add(-time.Hour)))
	r.create(t, h100Pod("carol-2", "carol", "two", t0.Add(-time.Hour)))
	big := map[string]any{"profile": "h100", "pad": strings.Repeat("x", 9<<10)}
	const tooBig = "The spawn form's options for this server take 9.0 KiB, more than the waitlist keeps with a server (8 KiB): " +
		"pick a profile with fewer options to join the waitlist, or start the server when a GPU is free."

	req := h100("dave", "", 1)
	req.UserOptions = big
	_, err := r.eng.Join(req)
	var je *JoinError
	if !errors.As(err, &je) || je.Message != tooBig {
		t.Errorf("join with 9 KiB of options: %v, want %q", err, tooBig)
	}
	res := r.admit(t, joining(req, true))
	if res.Allow || res.Waitlist != nil || !strings.HasSuffix(res.Message, " The waitlist could not take you: "+tooBig) {
		t.Errorf("admission joining with 9 KiB of options: %+v", res)
	}
	if st, _, _ := r.eng.WaitlistSnapshot(); len(st.Entries) != 0 {
		t.Errorf("%d entries kept, want none", len(st.Entries))
	}

	req.UserOptions = map[string]any{"profile": "h100", "image": "default"}
	if _, err := r.eng.Join(req); err != nil {
		t.Errorf("join with small options: %v", err)
	}
	if err := UserOptionsError(big); err == nil {
		t.Error("UserOptionsError(9 KiB): nil")
	}

	// An ordinary spawn with large options starts when a unit is free.
	r.remove(t, "carol-1")
	spawn := h100("erin", "", 1)
	spawn.UserOptions = big
	if err := r.eng.Leave("dave", ""); err != nil {
		t.Fatal(err)
	}
	if res := r.admit(t, spawn); !res.Allow {
		t.Errorf("spawn with 9 KiB of options and a free H100: %s %s", res.Reason, res.Message)
	}
}

// TestLoadWaitlistTrimsLargeOptions: an entry saved before joins were bounded, whose spawn options are over what the
// waitlist keeps, keeps its place without them and without auto-start; the others load as they were.
func TestLoadWaitlistTrimsLargeOptions(t *testing.T) {
	r := newWaitRig(t, &decayedTable{m: map[string]map[string]float64{}})
	small := map[string]any{"profile": "h100"}
	large := map[string]any{"profile": "h100", "pad": strings.Repeat("x", maxUserOptions)}
	trimmed := r.eng.LoadWaitlist(waitlist.State{Entries: []waitlist.Entry{
		{User: "dave", Class: "h100", JoinedAt: t0, AutoStart: true, UserOptions: large},
		{User: "frank", Class: "h100", JoinedAt: t0.Add(time.Second), AutoStart: true, UserOptions: small},
	}})
	if len(trimmed) != 1 || trimmed[0].User != "dave" {
		t.Fatalf("trimmed %+v, want dave's entry", trimmed)
	}
	st, _, _ := r.eng.WaitlistSnapshot()
	want := []waitlist.Entry{
		{User: "dave", Class: "h100", JoinedAt: t0},
		{User: "frank", Class: "h100", JoinedAt: t0.Add(time.Second), AutoStart: true, UserOptions: small},
	}
	if diff := cmp.Diff(want, st.Entries); diff != "" {
		t.Errorf("loaded entries (-want +got):\n%s", diff)
	}
}

// TestWaitlistFull: a join that would take the saved queue beyond what the usage API keeps is refused, saying
// so, and nothing is queued; a server already queued may still change its entry.
func TestWaitlistFull(t *testing.T) {
	r := newWaitRig(t, &decayedTable{m: map[string]map[string]float64{}})
	r.create(t, h100Pod("carol-1", "carol", "", t0.Add(-time.Hour)))
	r.create(t, h100Pod("carol-2", "carol", "two", t0.Add(-time.Hour)))
	// Full: large entries, then small ones, until even a small one would not fit.
	var st waitlist.State
	size := len(`{"entries":[],"seq":0}`)
	for _, pad := range []int{7 << 10, 0} {
		for {
			en := waitlist.Entry{User: fmt.Sprintf("u%03d", len(st.Entries)), Class: "gpu H100", JoinedAt: t0,
				UserOptions: map[string]any{"profile": "h100", "pad": strings.Repeat("x", pad)}}
			b, err := json.Marshal(en)
			if err != nil {
				t.Fatal(err)
			}
			if size+len(b)+1 > maxSavedState {
				break
			}
			size += len(b) + 1
			st.Entries = append(st.Entries, en)
		}
	}
	r.eng.LoadWaitlist(st)
	req := h100("dave", "", 1)
	req.UserOptions = map[string]any{"profile": "h100"}
	_, err := r.eng.Join(req)
	var je *JoinError
	want := fmt.Sprintf("The waitlist is full right now (%d servers wait): try again when some of them have started, "+
		"or start the server when a GPU is free.", len(st.Entries))
	if !errors.As(err, &je) || je.Message != want {
		t.Fatalf("join into a full waitlist: %v, want %q", err, want)
	}
	if got, _, _ := r.eng.WaitlistSnapshot(); len(got.Entries) != len(st.Entries) {
		t.Errorf("%d entries, want %d (dave not queued)", len(got.Entries), len(st.Entries))
	}
	// A queued server may change its entry when it does not grow the queue beyond the bound.
	again := h100("u000", "", 1)
	again.UserOptions = map[string]any{"profile": "h100", "pad": strings.Repeat("x", 7<<10+512)}
	if _, err := r.eng.Join(again); !errors.As(err, &je) || !strings.HasPrefix(je.Message, "The waitlist is full right now") {
		t.Errorf("a queued server growing its entry past the bound: %v, want the waitlist full", err)
	}
	again.UserOptions = map[string]any{"profile": "h100"}
	if _, err := r.eng.Join(again); err != nil {
		t.Errorf("a queued server making its entry smaller: %v", err)
	}
	if err := r.eng.Leave("u001", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := r.eng.Join(req); err != nil {
		t.Errorf("join once there is room again: %v", err)
	}
	// Joins in a row grow the known size instead of encoding the queue again: it stays within a few bytes.
	for _, u := range []string{"erin", "frank"} {
		if _, err := r.eng.Join(h100(u, "", 1)); err != nil {
			t.Fatal(err)
		}
	}
	r.eng.mu.Lock()
	b, err := json.Marshal(r.eng.wl.st)
	known, current := r.eng.wl.size, r.eng.wl.sized && r.eng.wl.sizeGen == r.eng.wl.gen
	r.eng.mu.Unlock()
	if err != nil || !current || known < len(b)-16 || known > len(b)+16 {
		t.Errorf("known size %d (current %v), the queue's JSON %d bytes", known, current, len(b))
	}
}

// TestWaitlistEntryBound: one entry as saved is bounded whatever makes it large (an API join may send a long profile
// or node selector, not only options), and a server already queued cannot grow its entry past it either.
func TestWaitlistEntryBound(t *testing.T) {
	r := newWaitRig(t, &decayedTable{m: map[string]map[string]float64{}})
	r.create(t, h100Pod("carol-1", "carol", "", t0.Add(-time.Hour)))
	r.create(t, h100Pod("carol-2", "carol", "two", t0.Add(-time.Hour)))
	req := h100("dave", "", 1)
	if _, err := r.eng.Join(req); err != nil {
		t.Fatal(err)
	}
	req.Profile = strings.Repeat("p", 20<<10)
	_, err := r.eng.Join(req)
	var je *JoinError
	if !errors.As(err, &je) || !strings.Contains(je.Message, "more than it keeps for one server (16 KiB)") {
		t.Fatalf("re-join with a 20 KiB profile: %v, want refused for the entry's size", err)
	}
	if st, _, _ := r.eng.WaitlistSnapshot(); len(st.Entries) != 1 || st.Entries[0].Profile != "" {
		t.Errorf("entries %+v, want dave's first entry unchanged", st.Entries)
	}
}
