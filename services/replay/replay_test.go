package replay

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	ckit "github.com/gpuhub/gpuhub/services/gpu-culler/cullerkit"
)

// synthetic writes a small trace in the PAI files' format: 4 nodes, 60 GPU pods over two days (whole, multi-GPU
// and fractional requests), so the replay's tests run without the trace (which is not shipped).
func synthetic(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	nodes := "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,8,G2\nn1,64000,262144,2,T4\nn2,64000,262144,2,T4\nn3,64000,262144,4,P100\n"
	var pods strings.Builder
	pods.WriteString("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n")
	pods.WriteString("cpu-only,1000,1024,0,0,,BE,Running,0,3600,0\n")
	for i := range 60 {
		gpus, milli := 1, 1000
		switch i % 6 {
		case 1:
			milli = 460
		case 2:
			milli = 810
		case 3:
			if i%12 == 3 {
				gpus = 4
			}
		}
		created := i * 2400
		life := 1800 + (i*7919)%(9*3600)
		fmt.Fprintf(&pods, "p%02d,4000,8192,%d,%d,,LS,Running,%d,%d,%d\n", i, gpus, milli, created, created+life, created)
	}
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(NodeFile, nodes)
	write(PodFile, pods.String())
	return dir
}

func testConfig(t *testing.T, fraction float64, from int64, gpus int) (*Config, Policies) {
	t.Helper()
	cfg, err := LoadConfig("config/replay.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Trace.Fraction, cfg.Trace.From, cfg.Capacity.GPUs = fraction, from, gpus
	pol, err := LoadPolicies("config")
	if err != nil {
		t.Fatal(err)
	}
	return cfg, pol
}

// replayTable runs every mode and returns the table and the results.
func replayTable(t *testing.T, dir string, cfg *Config, pol Policies) (string, []*Result) {
	t.Helper()
	nodes, pods, err := ReadTrace(dir)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Replay(cfg, pol, nodes, pods)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	Table(&b, rep.Results)
	return b.String(), rep.Results
}

// checkInvariants are what must hold in every run, whatever the model's numbers.
func checkInvariants(t *testing.T, rs []*Result) {
	t.Helper()
	for _, r := range rs {
		c := r.Counts()
		const eps = 1e-6
		switch {
		case c.Overcommitted != 0:
			t.Errorf("%s: %d node-minutes with more GPU units bound than the node has", r.Mode, c.Overcommitted)
		case c.Waits != c.Requests:
			t.Errorf("%s: %d requests but %d times-to-GPU: every request is served, given up or still waiting at the end", r.Mode, c.Requests, c.Waits)
		case r.busyMin+r.idleMin > r.heldMin+eps || r.busyMin+r.idleMin < r.heldMin-eps:
			t.Errorf("%s: busy %.1f + idle %.1f != held %.1f GPU-minutes", r.Mode, r.busyMin, r.idleMin, r.heldMin)
		case r.AllocationRate > 1+eps:
			t.Errorf("%s: allocation rate %.3f above 1", r.Mode, r.AllocationRate)
		case c.FalseCulls > c.Culls:
			t.Errorf("%s: %d false culls of %d", r.Mode, c.FalseCulls, c.Culls)
		case !r.Mode.hubCuller() && !r.Mode.gpuCuller() && c.Culls != 0:
			t.Errorf("%s: %d servers culled without a culler", r.Mode, c.Culls)
		case r.Mode.gpuCuller() && c.Culls > c.Warnings:
			t.Errorf("%s: %d stops but %d warnings: gpu-culler never stops without a warning", r.Mode, c.Culls, c.Warnings)
		case !r.Mode.waitlist() && c.Joins != 0:
			t.Errorf("%s: %d waitlist joins without a waitlist", r.Mode, c.Joins)
		case c.Error != 0:
			t.Errorf("%s: gpu-quota could not decide %d times", r.Mode, c.Error)
		case r.JainMin <= 0 || r.JainMin > 1+eps:
			t.Errorf("%s: Jain's index %.3f outside (0, 1]", r.Mode, r.JainMin)
		case !math.IsNaN(r.JainContendedMin) && (r.JainContendedMin <= 0 || r.JainContendedMin > 1+eps):
			t.Errorf("%s: Jain's index over contended minutes %.3f outside (0, 1]", r.Mode, r.JainContendedMin)
		case math.IsNaN(r.JainContendedMin) != (r.ContendedShare == 0):
			t.Errorf("%s: Jain over contended minutes %.3f with %.3f of the minutes contended", r.Mode, r.JainContendedMin, r.ContendedShare)
		case r.WaitedShare > 0 && r.WaitMean <= 0:
			t.Errorf("%s: %.3f of the requests waited but the mean time-to-GPU is %.1f", r.Mode, r.WaitedShare, r.WaitMean)
		}
	}
}

func TestReplaySynthetic(t *testing.T) {
	dir := synthetic(t)
	tables := map[string]string{}
	for _, tc := range []struct {
		name  string
		shape string
		gpus  int
	}{
		{"pareto gaps", AwayPareto, 8},
		{"exponential gaps", AwayExponential, 8},
		{"pareto gaps, contended", AwayPareto, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, pol := testConfig(t, 1, 0, tc.gpus)
			cfg.Idleness.AwayShape = tc.shape
			first, rs := replayTable(t, dir, cfg, pol)
			checkInvariants(t, rs)
			again, _ := replayTable(t, dir, cfg, pol)
			if diff := cmp.Diff(first, again); diff != "" {
				t.Errorf("same seed, different table (-first +again):\n%s", diff)
			}
			for _, r := range rs {
				c := r.Counts()
				if (r.Mode.admission() && c.Admissions == 0) || (r.Mode.gpuCuller() && c.Decisions == 0) {
					t.Errorf("%s: %d admissions, %d culler decisions: the services' code did not run", r.Mode, c.Admissions, c.Decisions)
				}
			}
			cfg.Seed++
			other, _ := replayTable(t, dir, cfg, pol)
			if other == first {
				t.Error("another seed gave the same table: the seed does not reach the idleness model")
			}
			tables[tc.name] = first
		})
	}
	if tables["pareto gaps"] == tables["exponential gaps"] {
		t.Error("awayShape pareto and exponential gave the same table: the shape does not reach the idleness model")
	}
}

// TestLomax checks the heavy-tailed draws against their distribution: the mean (within sampling error at this
// tail index) and the tail P(X > x) = (1 + x/scale)^-alpha at a few points.
func TestLomax(t *testing.T) {
	const n = 400_000
	for _, tc := range []struct {
		alpha, mean float64
		meanTol     float64 // relative; a tail index near 1 converges slowly
	}{
		{alpha: 2.5, mean: 240, meanTol: 0.02},
		{alpha: 1.5, mean: 240, meanTol: 0.10},
	} {
		t.Run(fmt.Sprintf("alpha %.1f", tc.alpha), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			scale := tc.mean * (tc.alpha - 1)
			points := []float64{60, 240, 1440}
			above := make([]int, len(points))
			sum := 0.0
			for range n {
				x := lomax(rng, tc.alpha, tc.mean)
				if x < 0 {
					t.Fatalf("draw %g below 0", x)
				}
				sum += x
				for i, p := range points {
					if x > p {
						above[i]++
					}
				}
			}
			if got := sum / n; math.Abs(got/tc.mean-1) > tc.meanTol {
				t.Errorf("mean %.1f, want %.1f within %.0f %%", got, tc.mean, 100*tc.meanTol)
			}
			for i, p := range points {
				want := math.Pow(1+p/scale, -tc.alpha)
				if got := float64(above[i]) / n; math.Abs(got-want) > 0.005 {
					t.Errorf("P(X > %.0f) = %.4f, want %.4f", p, got, want)
				}
			}
		})
	}
}

func TestPickCapacity(t *testing.T) {
	rows := []CapacityRow{{Want: 24, WaitedShare: 0.30}, {Want: 28, WaitedShare: 0.12}, {Want: 32, WaitedShare: 0.05},
		{Want: 36, WaitedShare: 0.01}, {Want: 40, WaitedShare: 0.06}, {Want: 44, WaitedShare: 0}}
	for _, tc := range []struct {
		name    string
		share   float64
		want    int
		wantErr bool
	}{
		{name: "largest at or above the share, even past a dip", share: 0.05, want: 40},
		{name: "a higher share picks less capacity", share: 0.10, want: 28},
		{name: "none qualifies", share: 0.5, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := pickCapacity(rows, tc.share)
			if (err != nil) != tc.wantErr {
				t.Fatalf("pickCapacity error = %v, want error %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("pickCapacity (-want +got):\n%s", diff)
			}
		})
	}
}

// TestReplaySmoke replays 5 % of the real trace (when ../shared/data/pai-gpu-2023 is there): the same table twice,
// and the invariants.
func TestReplaySmoke(t *testing.T) {
	dir := os.Getenv("GPUHUB_REPLAY_TRACE")
	if dir == "" {
		for _, up := range []string{"../../../shared/data/pai-gpu-2023", "../../../../shared/data/pai-gpu-2023"} {
			if _, err := os.Stat(filepath.Join(up, PodFile)); err == nil {
				dir = up
				break
			}
		}
	}
	if dir == "" {
		// ../shared is beside every checkout (the developers' and CI's): a missing trace is an error, not a skip.
		t.Fatal("the PAI trace is not next to this checkout (../shared/data/pai-gpu-2023); set GPUHUB_REPLAY_TRACE to its folder")
	}
	cfg, pol := testConfig(t, 0.05, 10_000_000, 48)
	first, rs := replayTable(t, dir, cfg, pol)
	checkInvariants(t, rs)
	again, _ := replayTable(t, dir, cfg, pol)
	if diff := cmp.Diff(first, again); diff != "" {
		t.Errorf("same seed, different table (-first +again):\n%s", diff)
	}
}

func TestLoadConfigRejectsBadValues(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(path, []byte("trace: {fraction: 2}\nusers: {count: 0}\nbogus: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := LoadConfig(path)
	if err == nil || !strings.Contains(err.Error(), `unknown key "bogus"`) {
		t.Errorf("LoadConfig = %v, want the unknown key reported with its place", err)
	}
}

func TestValidateIdlenessAndCapacity(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   string // in the error; empty: valid
	}{
		{name: "the shipped config", change: func(*Config) {}},
		{name: "exponential gaps", change: func(c *Config) { c.Idleness.AwayShape = AwayExponential }},
		{name: "unknown shape", change: func(c *Config) { c.Idleness.AwayShape = "weibull" }, want: "awayShape"},
		{name: "tail index with an infinite mean", change: func(c *Config) { c.Idleness.AwayTailIndex = 1 }, want: "awayTailIndex"},
		{name: "a named capacity needs no rule", change: func(c *Config) { c.Capacity.GPUs, c.Capacity.Choose = 40, Choose{} }},
		{name: "no capacity and no rule", change: func(c *Config) { c.Capacity.Choose = Choose{} }, want: "choose"},
		{name: "rule share out of range", change: func(c *Config) { c.Capacity.Choose.WaitedShare = 1 }, want: "waitedShare"},
		{name: "negative capacity", change: func(c *Config) { c.Capacity.GPUs = -1 }, want: "gpus"},
		{name: "fit share above 1", change: func(c *Config) { c.RightSize.Fit = 1.5 }, want: "fit"},
		{name: "negative follow share", change: func(c *Config) { c.RightSize.Follow = -0.1 }, want: "follow"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := LoadConfig("config/replay.yaml")
			if err != nil {
				t.Fatal(err)
			}
			tc.change(cfg)
			err = errors.Join(cfg.Validate()...)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Validate = %v, want none", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Validate = %v, want an error naming %q", err, tc.want)
			}
		})
	}
}

// TestScaleCullerIdle: the policy variation multiplies gpu.idlePeriod and each kind's idlePeriod and nothing
// else, and gpu-culler's own parser reads the result; a file without gpu.idlePeriod is an error, not a silent
// no-op.
func TestScaleCullerIdle(t *testing.T) {
	pol, err := LoadPolicies("config")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := cullerIdlePeriods(pol), "1h, shared 30m"; got != want {
		t.Errorf("cullerIdlePeriods = %q, want %q", got, want)
	}
	before, err := ckit.ParsePolicy(pol.CullerName, pol.Culler)
	if err != nil {
		t.Fatal(err)
	}
	if err := scaleCullerIdle(&pol, 4); err != nil {
		t.Fatal(err)
	}
	after, err := ckit.ParsePolicy(pol.CullerName, pol.Culler)
	if err != nil {
		t.Fatalf("gpu-culler refuses the changed policy: %v\n%s", err, pol.Culler)
	}
	if got := after.GPU.IdlePeriod; got == nil || time.Duration(*got) != 4*time.Hour {
		t.Errorf("gpu.idlePeriod = %v, want 4h", got)
	}
	shared := after.Kinds["shared"]
	if got := shared.IdlePeriod; got == nil || time.Duration(*got) != 2*time.Hour {
		t.Errorf("kinds.shared.idlePeriod = %v, want 2h", got)
	}
	after.GPU.IdlePeriod = before.GPU.IdlePeriod
	shared.IdlePeriod = before.Kinds["shared"].IdlePeriod
	after.Kinds["shared"] = shared
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("more than the idle periods changed (-before +after):\n%s", diff)
	}
	if got, want := cullerIdlePeriods(pol), "4h, shared 2h"; got != want {
		t.Errorf("cullerIdlePeriods after x4 = %q, want %q", got, want)
	}
	bad := Policies{Culler: []byte("every: 1m\n"), CullerName: "culler.yaml"}
	if err := scaleCullerIdle(&bad, 2); err == nil {
		t.Error("a policy without gpu.idlePeriod was accepted")
	}
}

// TestReturnFloor: the idle time from which a Pareto-away user's return within the false-cull window is rarer
// than p, against the survival function it inverts; none for memoryless absences.
func TestReturnFloor(t *testing.T) {
	cfg, err := LoadConfig("config/replay.yaml")
	if err != nil {
		t.Fatal(err)
	}
	got, ok := cfg.returnFloor(0.02)
	if !ok {
		t.Fatal("no floor for the main (Pareto) model")
	}
	a := cfg.Idleness.AwayTailIndex
	s := cfg.Idleness.AwayMean.Std().Minutes() * (a - 1)
	w := cfg.Behaviour.FalseCullWindow.Std().Minutes()
	back := func(t float64) float64 { return 1 - math.Pow((s+t)/(s+t+w), a) }
	if p := back(got); math.Abs(p-0.02) > 1e-9 {
		t.Errorf("return chance at the floor %.1f min = %.6f, want 0.02", got, p)
	}
	if back(got-60) <= 0.02 {
		t.Errorf("an hour before the floor (%.1f min) the chance is already <= 2 %%", got)
	}
	cfg.Idleness.AwayShape = AwayExponential
	if _, ok := cfg.returnFloor(0.02); ok {
		t.Error("a floor for memoryless absences")
	}
}
