package replay

import (
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuhub/gpuhub/services/internal/contract"
	"github.com/gpuhub/gpuhub/services/internal/gpu"
	ipolicy "github.com/gpuhub/gpuhub/services/internal/policy"
	"github.com/gpuhub/gpuhub/services/internal/rightsize"
)

// testCluster is a whole T4 node, a T4 node time-sliced 2 ways and a whole G2 node (memory undisclosed).
func testCluster() *cluster {
	return newClusterWith(map[string]bool{"t4-shared": true}, []TraceNode{
		{Name: "g2", GPUs: 8, Model: "G2"}, {Name: "t4", GPUs: 2, Model: "T4"}, {Name: "t4-shared", GPUs: 2, Model: "T4"}})
}

// newClusterWith is newCluster with the time-sliced nodes named.
func newClusterWith(sliced map[string]bool, nodes []TraceNode) *cluster {
	c := newCluster("1", nodes, 0, 2)
	for _, n := range c.nodes {
		if sliced[n.name] {
			n.resource, n.units, n.free = gpu.ResourceGPUShared, n.units*2, n.units*2
			n.labels[gpu.LabelSharingStrategy], n.labels[gpu.LabelReplicas] = gpu.SharingTimeSlicing, "2"
			c.shared = true
		}
	}
	return c
}

func nodeNamed(c *cluster, name string) *simNode {
	for _, n := range c.nodes {
		if n.name == name {
			return n
		}
	}
	return nil
}

// TestFollowAdvice: the advice-following decision on a simulated profile, by gpuhub's own rule: a user takes a
// share when the measured use fits it and there is enough of it (an hour busy, 100 busy samples), and not on a
// model the cluster does not time-slice or whose memory is unknown.
func TestFollowAdvice(t *testing.T) {
	c := testCluster()
	offers := offersOf(c)
	whole := map[string]int64{gpu.ResourceGPU: 1}
	t4, g2 := heldOffer(whole, nodeNamed(c, "t4")), heldOffer(whole, nodeNamed(c, "g2"))
	fits := Intensity{Fits: true, PeakMemory: 0.3, P95SMUtil: 40, ReplicasShare: 0.5}
	enough := Measured{HeldMin: 600, BusyMin: 150, From: 0, To: 599}
	type out struct {
		Verdict string
		Take    bool
		First   gpu.Kind
	}
	for _, tc := range []struct {
		name string
		held rightsize.Offer
		it   Intensity
		m    Measured
		want out
	}{
		{"fits, enough data", t4, fits, enough, out{contract.VerdictSmaller, true, gpu.KindShared}},
		{"fits, 59 min busy", t4, fits, Measured{HeldMin: 600, BusyMin: 59, To: 599}, out{contract.VerdictNotEnoughData, false, ""}},
		{"fits, 99 busy samples", t4, fits, Measured{HeldMin: 600, BusyMin: 99, To: 599}, out{contract.VerdictNotEnoughData, false, ""}},
		{"fits, exactly 100 busy samples", t4, fits, Measured{HeldMin: 600, BusyMin: 100, To: 599}, out{contract.VerdictSmaller, true, gpu.KindShared}},
		// 0.42 x 16 GiB x 1.2 = 8.06 GiB: over the share's 8 GiB with the margin.
		{"memory over with the margin", t4, Intensity{PeakMemory: 0.42, P95SMUtil: 30}, enough, out{contract.VerdictKeep, false, ""}},
		{"compute over half", t4, Intensity{PeakMemory: 0.2, P95SMUtil: 55}, enough, out{contract.VerdictKeep, false, ""}},
		{"on G2: memory undisclosed", g2, fits, enough, out{contract.VerdictNotEnoughData, false, ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, take := followAdvice(profileOf("u", "s", tc.held, tc.it, tc.m), offers, clock(tc.m.To))
			got := out{Verdict: a.Verdict, Take: take}
			if take {
				got.First = a.Candidates[0].Kind
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("followAdvice (-want +got):\n%s\nreason: %s", diff, a.Reason)
			}
		})
	}
}

// TestIntensityOf: the share of users whose drawn work fits is the parameter (within sampling error over 2000
// users), and the advice's rule agrees with every draw: a user drawn to fit gets a share, one drawn not to fit
// keeps the whole GPU.
func TestIntensityOf(t *testing.T) {
	c := testCluster()
	offers := offersOf(c)
	t4 := heldOffer(map[string]int64{gpu.ResourceGPU: 1}, nodeNamed(c, "t4"))
	enough := Measured{HeldMin: 600, BusyMin: 150, To: 599}
	type counts struct{ Fit, Disagree int }
	for _, tc := range []struct {
		fit  float64
		want counts // Fit checked within +-3 % of the users
	}{{0, counts{0, 0}}, {0.3, counts{600, 0}}, {1, counts{2000, 0}}} {
		t.Run(strconv.FormatFloat(tc.fit, 'g', -1, 64), func(t *testing.T) {
			var got counts
			for i := range 2000 {
				it := intensityOf("20230601", "user"+strconv.Itoa(i), tc.fit, 2)
				_, take := followAdvice(profileOf("u", "s", t4, it, enough), offers, clock(enough.To))
				if it.Fits {
					got.Fit++
				}
				if take != it.Fits {
					got.Disagree++
				}
			}
			if got.Fit >= tc.want.Fit-60 && got.Fit <= tc.want.Fit+60 {
				got.Fit = tc.want.Fit
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("intensityOf at fit %g (-want +got):\n%s", tc.fit, diff)
			}
		})
	}
}

// adviceNumbers are the numbers of a run the right-size setup changes.
type adviceNumbers struct {
	Idle, Held, P99 float64
	Waits           []int
	Counts          Counts
	RightSized      int
}

func numbersOf(r *Result) adviceNumbers {
	return adviceNumbers{Idle: r.IdleHeldGPUHours, Held: r.HeldGPUHours, P99: r.WaitP99, Waits: r.waits, Counts: r.Counts(), RightSized: r.rightSized}
}

// TestRightSizeSetup: with no one following the advice the setup is gpuhub, to the request; with every user
// following and every user's work fitting, sessions move to shares; either way the invariants hold.
func TestRightSizeSetup(t *testing.T) {
	dir := synthetic(t)
	nodes, pods, err := ReadTrace(dir)
	if err != nil {
		t.Fatal(err)
	}
	// The synthetic trace's G2 node (memory undisclosed: no advice on it) as a T4, where servers pack first.
	for i := range nodes {
		if nodes[i].Model == "G2" {
			nodes[i].Model = "T4"
		}
	}
	run := func(follow, fit float64) map[Mode]*Result {
		// Every node of the synthetic trace: with 8 GPUs the seeded subset is the G2 node alone (memory undisclosed).
		cfg, pol := testConfig(t, 1, 0, 16)
		// Few users, so that they come back with a next session (60 pods).
		cfg.Users.Count, cfg.RightSize.Follow, cfg.RightSize.Fit = 5, follow, fit
		// Long busy bursts, so that a server has the hour and the 100 samples the advice needs (the synthetic
		// sessions last at most 9.5 h).
		cfg.Idleness.BusyMean, cfg.Idleness.AwayProbability = ipolicy.Duration(3*time.Hour), 0
		rep, err := Replay(cfg, pol, nodes, pods)
		if err != nil {
			t.Fatal(err)
		}
		checkInvariants(t, rep.Results)
		return byMode(rep.Results)
	}
	none := run(0, 1)
	if diff := cmp.Diff(numbersOf(none[GPUHub]), numbersOf(none[GPUHubRightSize])); diff != "" {
		t.Errorf("no one follows the advice, yet the setup differs from gpuhub (-gpuhub +right-size):\n%s", diff)
	}
	all := run(1, 1)
	adv, moved := all[GPUHubRightSize].Advice()
	if adv[contract.VerdictSmaller] == 0 || moved == 0 {
		t.Errorf("every user follows and fits: advice %v, %d sessions on a share; want some of each", adv, moved)
	}
	if diff := cmp.Diff(numbersOf(all[GPUHub]), numbersOf(none[GPUHub])); diff != "" {
		t.Errorf("the right-size shares changed the gpuhub setup (-follow 1 +follow 0):\n%s", diff)
	}
}
