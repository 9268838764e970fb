package mk

import (
	"bytes"
	"errors"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"
)

// sharedExempt are rules that targets of two lanes reach and test-deps need not run first, and why.
var sharedExempt = map[string]string{
	"build": "go build only: the go command's cache is safe to share and each binary is replaced whole",
	"vet":   "go vet only: reads the tree and the go command's cache",
}

// TestLanesShareNothingUnbuilt: make test runs its lanes side by side, so whatever targets of two lanes both
// install or build must be done by test-deps before the lanes start; otherwise two lanes could build it at once
// (the panel's wheel, a venv, the kube binaries, the compiled UI tests) and one would read it half written. The
// shared targets (TEST_SHARED) may run in any lane, beside any other and beside each other: each counts as a
// lane of its own.
func TestLanesShareNothingUnbuilt(t *testing.T) {
	mf := readMakefiles(t, "..")
	lanes := map[string][]string{
		"2": strings.Fields(mf.expand(mf.vars["TEST_LANE2"])),
		"3": strings.Fields(mf.expand(mf.vars["TEST_LANE3"])),
	}
	shared := strings.Fields(mf.expand(mf.vars["TEST_SHARED"]))
	if len(shared) == 0 {
		t.Fatal("TEST_SHARED is empty; is the Makefile read right?")
	}
	for _, target := range shared {
		lanes["shared "+target] = []string{target}
	}
	inLane := map[string]bool{}
	for name, targets := range lanes {
		if len(targets) == 0 {
			t.Fatalf("lane %s is empty; is the Makefile read right?", name)
		}
		for _, target := range targets {
			if !slices.Contains(mf.testTargets, target) {
				t.Errorf("lane %s names %q, which is not in TEST_TARGETS", name, target)
			}
			if inLane[target] {
				t.Errorf("%q is in two of TEST_LANE2, TEST_LANE3 and TEST_SHARED", target)
			}
			inLane[target] = true
		}
	}
	for _, target := range mf.testTargets {
		if !inLane[target] {
			lanes["1"] = append(lanes["1"], target)
		}
	}
	if slices.Contains(mf.testTargets, "test-deps") {
		t.Error("test-deps is in TEST_TARGETS; make test runs it before the lanes")
	}
	done := map[string]bool{}
	for _, r := range mf.reachable([]string{"test-deps"}) {
		done[r] = true
	}
	reachedBy := map[string][]string{} // rule -> the lanes that reach it
	for _, name := range slices.Sorted(maps.Keys(lanes)) {
		for _, r := range mf.reachable(lanes[name]) {
			if !slices.Contains(mf.testTargets, r) {
				reachedBy[r] = append(reachedBy[r], name)
			}
		}
	}
	for _, r := range slices.Sorted(maps.Keys(reachedBy)) {
		if by := reachedBy[r]; len(by) > 1 && !done[r] && sharedExempt[r] == "" {
			t.Errorf("lanes %v all reach %q, which test-deps does not run: add it to test-deps' prerequisites", by, r)
		}
	}
}

// fakeMake is what lanes.sh runs as $MAKE in TestLanes: a target named ok* passes, slow* passes after 2 s, busy*
// after a fixed amount of work on a CPU (a couple of seconds here: counted in CPU, not wall time, so that a
// loaded machine only makes it take longer),
// fail* fails with exit 3 the way a Go test does, its message followed by a dump of logs.
const fakeMake = `#!/usr/bin/env bash
t="${@: -1}"
case "$t" in
ok*) echo "$t says hello" ;;
slow*) sleep 2; echo "$t done" ;;
long*) sleep 4; echo "$t done" ;;
busy*) for ((i = 0; i < 2000000; i++)); do :; done; echo "$t done" ;;
fail*) echo "--- FAIL: TestBroke (1.00s)"; echo "    broke_test.go:12: $t broke"; for i in $(seq 80); do echo "        dumped log line $i"; done; exit 3 ;;
esac
`

type laneRow struct {
	Target, Lane, Result string
}

// fakeMake's targets: ok* passes at once, slow* after 2 s, long* after 4 s, fail* fails.

func TestLanes(t *testing.T) {
	tests := map[string]struct {
		shared   string // --shared
		lanes    []string
		want     []laneRow
		wantFail string
	}{
		"the shared targets go to the lane done first": {
			shared: "slow5 ok6",
			lanes:  []string{"long1", "ok2 ok3"},
			// lane 2 is done at once and takes slow5; lane 1, still busy, leaves ok6 to lane 2 too.
			want: []laneRow{{"long1", "1", "ok"}, {"ok2", "2", "ok"}, {"ok3", "2", "ok"}, {"slow5", "2", "ok"}, {"ok6", "2", "ok"}},
		},
		"each shared target runs once, in the lane that took it": {
			shared: "slow3 slow4",
			lanes:  []string{"ok1", "ok2"},
			want:   []laneRow{{"ok1", "1", "ok"}, {"ok2", "2", "ok"}, {"slow3", "?", "ok"}, {"slow4", "?", "ok"}},
		},
		"no shared target starts after a failure": {
			shared: "ok3 ok4",
			lanes:  []string{"fail1", "slow2"},
			want: []laneRow{
				{"fail1", "1", "FAILED"}, {"slow2", "2", "ok"}, {"ok3", "-", "skipped"}, {"ok4", "-", "skipped"},
			},
			wantFail: "FAILED: make fail1",
		},
		"all pass": {
			lanes: []string{"ok1 ok2", "slow3 ok4"},
			want:  []laneRow{{"ok1", "1", "ok"}, {"ok2", "1", "ok"}, {"slow3", "2", "ok"}, {"ok4", "2", "ok"}},
		},
		"a failure lets the running target finish and starts no other": {
			lanes: []string{"fail1 ok2", "slow3 ok4"},
			want: []laneRow{
				{"fail1", "1", "FAILED"}, {"ok2", "-", "skipped"}, {"slow3", "2", "ok"}, {"ok4", "-", "skipped"},
			},
			wantFail: "--- FAIL: TestBroke (1.00s)\n    broke_test.go:12: fail1 broke\nFAILED: make fail1",
		},
		"one lane": {
			lanes: []string{"ok1 ok2"},
			want:  []laneRow{{"ok1", "1", "ok"}, {"ok2", "1", "ok"}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			mk := filepath.Join(dir, "make")
			if err := os.WriteFile(mk, []byte(fakeMake), 0o755); err != nil {
				t.Fatal(err)
			}
			logs := filepath.Join(dir, "logs")
			args := []string{logs}
			if tc.shared != "" {
				args = append(args, "--shared", tc.shared)
			}
			cmd := exec.CommandContext(t.Context(), "./lanes.sh", append(args, tc.lanes...)...)
			cmd.Env = append(os.Environ(), "MAKE="+mk)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			var exit *exec.ExitError
			switch {
			case tc.wantFail == "" && err != nil:
				t.Fatalf("lanes.sh: %v\n%s", err, out.String())
			case tc.wantFail != "" && (!errors.As(err, &exit) || exit.ExitCode() != 1):
				t.Fatalf("lanes.sh: %v, want exit status 1\n%s", err, out.String())
			case tc.wantFail != "" && !strings.Contains(out.String(), tc.wantFail):
				t.Errorf("output lacks %q:\n%s", tc.wantFail, out.String())
			}
			got := laneTable(t, out.String())
			for i, row := range tc.want {
				if row.Lane == "?" && i < len(got) && (got[i].Lane == "1" || got[i].Lane == "2") {
					got[i].Lane = "?" // either lane may take it
				}
			}
			for _, row := range tc.want { // each target started once, whichever lane took it
				if n := strings.Count(out.String(), "] make "+row.Target+"\n"); row.Result != "skipped" && n != 1 {
					t.Errorf("%s started %d times, want once:\n%s", row.Target, n, out.String())
				}
			}
			if diff := gocmp.Diff(tc.want, got); diff != "" {
				t.Errorf("time table (-want +got):\n%s\n%s", diff, out.String())
			}
			// Each target's lines reach the terminal with its name and its log whole.
			for _, row := range tc.want {
				if row.Result != "ok" {
					continue
				}
				log, err := os.ReadFile(filepath.Join(logs, row.Target+".log"))
				if err != nil {
					t.Fatal(err)
				}
				if !strings.HasPrefix(string(log), row.Target+" ") {
					t.Errorf("%s.log = %q, want its output", row.Target, log)
				}
				if line := "[" + row.Target + "] " + strings.TrimSpace(string(log)); !strings.Contains(out.String(), line) {
					t.Errorf("output lacks %q:\n%s", line, out.String())
				}
			}
		})
	}
}

// laneTable reads lanes.sh's time table: target, lane and ok, FAILED or skipped.
func laneTable(t *testing.T, out string) []laneRow {
	t.Helper()
	_, table, ok := strings.Cut(out, "time per target")
	if !ok {
		t.Fatalf("no time table in:\n%s", out)
	}
	var rows []laneRow
	for _, line := range strings.Split(table, "\n")[1:] {
		f := strings.Fields(line)
		if !strings.HasPrefix(line, "  ") || len(f) < 3 || f[0] == "wall" {
			break
		}
		if f[0] == "target" { // the columns' names
			continue
		}
		row := laneRow{Target: f[0], Lane: f[1], Result: "ok"}
		switch {
		case f[2] == "skipped":
			row.Result = "skipped"
		case len(f) > 4 && f[4] == "FAILED":
			row.Result = "FAILED"
		}
		rows = append(rows, row)
	}
	return rows
}

// TestLanesCPUTime: the time table says how much CPU each target's processes used (what makes make test slow on
// two cores is the work, not the waiting), and their sum beside the wall time.
func TestLanesCPUTime(t *testing.T) {
	dir := t.TempDir()
	mk := filepath.Join(dir, "make")
	if err := os.WriteFile(mk, []byte(fakeMake), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), "./lanes.sh", filepath.Join(dir, "logs"), "busy1", "slow2")
	cmd.Env = append(os.Environ(), "MAKE="+mk)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("lanes.sh: %v\n%s", err, out)
	}
	cpu := map[string]int{}
	_, table, _ := strings.Cut(string(out), "time per target")
	for _, line := range strings.Split(table, "\n")[1:] {
		f := strings.Fields(line)
		if len(f) >= 4 && f[0] != "target" && f[0] != "CPUs" {
			f = append(f[:1], f[len(f)-2:]...) // "wall time" is two words
			n, err := strconv.Atoi(strings.TrimSuffix(f[2], "s"))
			if err != nil {
				t.Fatalf("CPU column %q: %v\n%s", f[2], err, out)
			}
			cpu[f[0]] = n
		}
	}
	// busy1 counts to 2,000,000 in bash (about 2.5 s of CPU here); slow2 sleeps 2 s.
	if cpu["busy1"] < 1 || cpu["slow2"] != 0 || cpu["wall"] != cpu["busy1"] {
		t.Errorf("CPU seconds = %v, want busy1 at least 1, slow2 0 and their sum on the wall time's line\n%s", cpu, out)
	}
}
