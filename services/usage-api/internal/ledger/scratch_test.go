package ledger

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuhub/gpuhub/services/internal/yield"
)

// scratchPods returns the samples of n pods numbered from from, one user each, held from an hour before t0; a
// thousand pods make more than a sort run (the sorts merge through their buffers). Every tenth pod has two units
// of its class (holdings sums them), the next one a second unit of another class.
func scratchPods(from, n int) []Sample {
	out := make([]Sample, 0, n)
	for i := from; i < from+n; i++ {
		s := Sample{Key: Key{User: fmt.Sprintf("user%05d", i), Kind: "gpu", Class: "gpu A100"}, Pod: fmt.Sprintf("uid-%05d", i),
			Since: t0.Add(-time.Hour), Allocated: 1, Used: float64(i%7) / 7, UsedKnown: i%5 != 0}
		out = append(out, s)
		switch i % 10 {
		case 0:
			out = append(out, s)
		case 1:
			s.Class = "gpu T4"
			out = append(out, s)
		}
	}
	return out
}

// overlaps reports whether two slices' arrays (up to their capacity) share memory.
func overlaps[A, B any](a []A, b []B) bool {
	if cap(a) == 0 || cap(b) == 0 {
		return false
	}
	aStart, bStart := uintptr(unsafe.Pointer(unsafe.SliceData(a))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	aEnd := aStart + uintptr(cap(a))*unsafe.Sizeof(*new(A))
	bEnd := bStart + uintptr(cap(b))*unsafe.Sizeof(*new(B))
	return aStart < bEnd && bStart < aEnd
}

// TestTicksPublishNoScratch: the memory a tick reuses from the last one (Ledger.held, heldSort, charge) is never
// what a Result, the checkpoint (which Checkpoint's callers share) or the store holds: every Result and checkpoint
// is still what it was when its tick returned after ticks that held the same, more, fewer and other pods, and the
// checkpoint in memory is the store's.
func TestTicksPublishNoScratch(t *testing.T) {
	base := scratchPods(0, 1000)
	more := append(scratchPods(0, 1000), scratchPods(1000, 200)...)
	fewer := scratchPods(200, 700)
	changed := scratchPods(0, 1000)
	for i := range changed {
		changed[i].Allocated = 0.5
	}
	ticks := [][]Sample{base, base, base, more, more, fewer, fewer, nil, changed, changed, base}

	ctx := context.Background()
	s := openTestStore(t)
	l, err := New(ctx, s, Options{Interval: interval}, t0)
	if err != nil {
		t.Fatal(err)
	}
	type published struct {
		res        Result
		cp         Checkpoint
		wantPerKey map[Key]Totals
		wantCP     Checkpoint
	}
	var all []published
	for i, samples := range ticks {
		res, err := l.Record(ctx, t0.Add(time.Duration(i)*interval), samples)
		if err != nil {
			t.Fatal(err)
		}
		cp, _ := l.Checkpoint()
		stored, _, err := s.Checkpoint(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(stored, cp); diff != "" {
			t.Fatalf("tick %d: checkpoint in memory vs stored (-stored +memory):\n%s", i, diff)
		}
		for name, scratch := range map[string][]Holding{"held": l.held, "heldSort": l.heldSort} {
			if overlaps(cp.Held, scratch) {
				t.Fatalf("tick %d: the checkpoint's Held is in the ledger's %s", i, name)
			}
		}
		if overlaps(cp.Held, l.charge.incs) || overlaps(cp.Held, l.charge.incsSort) {
			t.Fatalf("tick %d: the checkpoint's Held is in the charger's increments", i)
		}
		wantCP := cp
		wantCP.Held, wantCP.Left = slices.Clone(cp.Held), slices.Clone(cp.Left)
		all = append(all, published{res: res, cp: cp, wantPerKey: maps.Clone(res.PerKey), wantCP: wantCP})
		checkConsistent(t, s)
	}
	for i, p := range all {
		if diff := cmp.Diff(p.wantPerKey, p.res.PerKey); diff != "" {
			t.Errorf("tick %d: Result.PerKey changed after later ticks (-then +now):\n%s", i, diff)
		}
		if diff := cmp.Diff(p.wantCP, p.cp); diff != "" {
			t.Errorf("tick %d: checkpoint changed after later ticks (-then +now):\n%s", i, diff)
		}
	}
}

// TestHoldingsScratch: a tick whose holdings are the checkpoint's shares the checkpoint's Held and keeps the
// memory it built them in for the next tick; one whose holdings changed gives that memory to its checkpoint.
func TestHoldingsScratch(t *testing.T) {
	ctx := context.Background()
	l, err := New(ctx, openTestStore(t), Options{Interval: interval}, t0)
	if err != nil {
		t.Fatal(err)
	}
	base, more := scratchPods(0, 1500), scratchPods(0, 1600)
	tests := []struct {
		name        string
		samples     []Sample
		wantShared  bool // the new checkpoint's Held is the last one's
		wantKept    bool // Ledger.held is the memory the last tick kept
		wantHeldLen int
	}{
		{name: "first tick", samples: base, wantHeldLen: 1650},
		{name: "steady", samples: base, wantShared: true, wantHeldLen: 1650},
		{name: "steady again", samples: base, wantShared: true, wantKept: true, wantHeldLen: 1650},
		{name: "more pods", samples: more, wantHeldLen: 1760},
		{name: "steady with more", samples: more, wantShared: true, wantHeldLen: 1760},
		{name: "no pods: the memory, far too large, is given back", samples: nil},
		{name: "no pods again", samples: nil, wantShared: true},
	}
	for i, tt := range tests {
		prev, _ := l.Checkpoint()
		kept := l.held
		if _, err := l.Record(ctx, t0.Add(time.Duration(i)*interval), tt.samples); err != nil {
			t.Fatal(err)
		}
		cp, _ := l.Checkpoint()
		shared := len(cp.Held) > 0 && unsafe.SliceData(cp.Held) == unsafe.SliceData(prev.Held) || len(cp.Held) == 0 && len(prev.Held) == 0
		got := fmt.Sprintf("shared %v, kept %v, %d held", shared, cap(kept) > 0 && unsafe.SliceData(l.held) == unsafe.SliceData(kept), len(cp.Held))
		want := fmt.Sprintf("shared %v, kept %v, %d held", tt.wantShared, tt.wantKept, tt.wantHeldLen)
		if got != want {
			t.Errorf("%s: %s, want %s", tt.name, got, want)
		}
	}
}

// TestWriteIncrementsRunners: SQLite's driver connection (sqliteRunner) and database/sql (txRunner, PostgreSQL's
// way) store the same rows, bit for bit, for commits around the statements' size, added to rows already there.
func TestWriteIncrementsRunners(t *testing.T) {
	incs := func(n int) []Increment {
		out := make([]Increment, n)
		for i := range out {
			out[i] = Increment{Key: Key{User: fmt.Sprintf("user%03d", i/2), Kind: "gpu", Class: []string{"gpu A100", "gpu T4"}[i%2]},
				Bucket: t0, Totals: Totals{Allocated: 5 + float64(i%3)/3, Used: float64(i%2) * 0.1, UsedUnknown: math.Copysign(0, -1)}}
		}
		return out
	}
	type row struct {
		User, Kind, Class       string
		Bucket                  int64
		Allocated, Used, UsedUn uint64 // the float64s' bits
	}
	read := func(t *testing.T, s *Store) []row {
		t.Helper()
		rows, err := s.db.QueryContext(context.Background(), `SELECT user_name, kind, class, bucket, allocated_s, used_s, unknown_s FROM gpu_usage ORDER BY user_name, kind, class, bucket`)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = rows.Close() }()
		var out []row
		for rows.Next() {
			var r row
			var a, u, k float64
			if err := rows.Scan(&r.User, &r.Kind, &r.Class, &r.Bucket, &a, &u, &k); err != nil {
				t.Fatal(err)
			}
			r.Allocated, r.Used, r.UsedUn = math.Float64bits(a), math.Float64bits(u), math.Float64bits(k)
			out = append(out, r)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	write := func(t *testing.T, s *Store, viaDriver bool, incs []Increment) {
		t.Helper()
		ctx := context.Background()
		conn, err := s.db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = conn.Close() }()
		tx, err := conn.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback() }()
		if viaDriver {
			err = conn.Raw(func(dc any) error {
				return s.writeIncrements(ctx, &sqliteRunner{conn: dc.(driver.ConnPrepareContext)}, incs)
			})
		} else {
			err = s.writeIncrements(ctx, txRunner{tx}, incs)
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []int{0, 1, incrementsPerStatement - 1, incrementsPerStatement, incrementsPerStatement + 1, 3*incrementsPerStatement + 5} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			var got [2][]row
			for i, viaDriver := range []bool{false, true} {
				s, err := OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "ledger.db"))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = s.Close() })
				write(t, s, viaDriver, incs(n))
				write(t, s, viaDriver, incs(n/2)) // onto rows already there
				got[i] = read(t, s)
			}
			if len(got[0]) != n {
				t.Fatalf("%d rows stored by database/sql for %d increments of as many keys", len(got[0]), n)
			}
			if diff := cmp.Diff(got[0], got[1]); diff != "" {
				t.Errorf("rows (-database/sql +driver):\n%s", diff)
			}
		})
	}
}

// TestIncrementBoxes: the arguments of rows boxed with the last row's boxes reused are those of each row boxed
// anew, bit for bit (0 and -0 are two values).
func TestIncrementBoxes(t *testing.T) {
	negZero := math.Copysign(0, -1)
	tests := map[string][]Increment{
		"all alike": {
			{Key: Key{"alice", "gpu", "gpu A100"}, Bucket: t0, Totals: Totals{Allocated: 5, Used: 2.5}},
			{Key: Key{"bob", "gpu", "gpu A100"}, Bucket: t0, Totals: Totals{Allocated: 5, Used: 2.5}},
		},
		"each column changes": {
			{Key: Key{"alice", "gpu", "gpu A100"}, Bucket: t0, Totals: Totals{Allocated: 5, Used: 2.5, UsedUnknown: 1}},
			{Key: Key{"alice", "mig", "gpu A100"}, Bucket: t0, Totals: Totals{Allocated: 5, Used: 2.5, UsedUnknown: 1}},
			{Key: Key{"alice", "mig", "mig 3g.20gb"}, Bucket: t0, Totals: Totals{Allocated: 5, Used: 2.5, UsedUnknown: 1}},
			{Key: Key{"alice", "mig", "mig 3g.20gb"}, Bucket: t0.Add(time.Hour), Totals: Totals{Allocated: 5, Used: 2.5, UsedUnknown: 1}},
			{Key: Key{"alice", "mig", "mig 3g.20gb"}, Bucket: t0.Add(time.Hour), Totals: Totals{Allocated: 4, Used: 2.5, UsedUnknown: 1}},
			{Key: Key{"alice", "mig", "mig 3g.20gb"}, Bucket: t0.Add(time.Hour), Totals: Totals{Allocated: 4, Used: 2, UsedUnknown: 1}},
			{Key: Key{"alice", "mig", "mig 3g.20gb"}, Bucket: t0.Add(time.Hour), Totals: Totals{Allocated: 4, Used: 2, UsedUnknown: 2}},
		},
		"zero and minus zero": {
			{Key: Key{"alice", "gpu", "gpu A100"}, Bucket: t0, Totals: Totals{Allocated: 0, Used: negZero}},
			{Key: Key{"bob", "gpu", "gpu A100"}, Bucket: t0, Totals: Totals{Allocated: negZero, Used: 0}},
			{Key: Key{"carol", "gpu", "gpu A100"}, Bucket: t0, Totals: Totals{Allocated: negZero, Used: 0}},
		},
		"empty strings": {
			{Key: Key{"", "", ""}, Bucket: time.Unix(0, 0)},
			{Key: Key{"alice", "", "x"}, Bucket: time.Unix(0, 0)},
			{Key: Key{"", "", ""}, Bucket: time.Unix(0, 0)},
		},
	}
	bits := cmp.Transformer("bits", math.Float64bits)
	for name, incs := range tests {
		t.Run(name, func(t *testing.T) {
			var want, got []any
			var boxes incrementBoxes
			for _, inc := range incs {
				want = append(want, inc.User, string(inc.Kind), inc.Class, inc.Bucket.Unix(), inc.Allocated, inc.Used, inc.UsedUnknown)
				got = boxes.append(got, inc)
			}
			if diff := cmp.Diff(want, got, bits); diff != "" {
				t.Errorf("arguments (-boxed anew +reused):\n%s", diff)
			}
		})
	}
}

// TestCommitCanceled: a commit whose context ends at any moment, the increments' statements on SQLite's driver
// connection included, writes all or nothing: the checkpoint's sums stay the table's, and the checkpoint is the
// last commit that returned no error, or one whose deadline hit while COMMIT's answer was on its way (it went
// through; PostgreSQL over TCP, seen in a CI run).
func TestCommitCanceled(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	incs := make([]Increment, 20*incrementsPerStatement)
	var sum Totals
	for i := range incs {
		incs[i] = Increment{Key: Key{User: fmt.Sprintf("user%05d", i), Kind: "gpu", Class: "gpu A100"}, Bucket: t0,
			Totals: Totals{Allocated: 5, Used: 1}}
		sum.add(incs[i].Totals)
	}
	cp := Checkpoint{At: t0, Ticks: 1}
	if err := s.Commit(ctx, nil, cp, nil); err != nil {
		t.Fatal(err)
	}
	next := func(cp Checkpoint) Checkpoint {
		n := cp
		n.At, n.Ticks = cp.At.Add(interval), cp.Ticks+1
		n.Sums.add(sum)
		return n
	}
	start := time.Now()
	if err := s.Commit(ctx, &cp, next(cp), incs); err != nil {
		t.Fatal(err)
	}
	cp = next(cp)
	full := time.Since(start)
	canceled, midIncrements, lostAnswers := 0, 0, 0
	for i := range 20 {
		cctx, cancel := context.WithTimeout(ctx, full*time.Duration(i)/10)
		err := s.Commit(cctx, &cp, next(cp), incs)
		cancel()
		if err == nil {
			cp = next(cp)
		} else {
			canceled++
			if strings.HasPrefix(err.Error(), "write ledger increments") {
				midIncrements++
			}
		}
		stored := checkConsistent(t, s)
		if err != nil && strings.HasPrefix(err.Error(), "commit ledger transaction") && cmp.Equal(next(cp), stored) {
			// The deadline hit while COMMIT's answer was on its way: the commit went through with its answer lost
			// (Ledger.Record handles it: the next tick finds the checkpoint moved). All of it, never a part.
			cp, lostAnswers = stored, lostAnswers+1
		}
		if diff := cmp.Diff(cp, stored); diff != "" {
			t.Fatalf("deadline %d/10 of a commit (err %v): checkpoint (-last committed +stored):\n%s", i, err, diff)
		}
	}
	t.Logf("%d of 20 commits canceled, %d of them while writing the increments, %d committed with the answer lost",
		canceled, midIncrements, lostAnswers)
}

// TestScratchSizes: memory kept from tick to tick serves a tick that needs no more of it and at least a quarter;
// a slice is otherwise made anew with an eighth to spare, a map made anew only when far too large (it grows by
// itself).
func TestScratchSizes(t *testing.T) {
	type got struct {
		Kept     bool
		Cap      int // a new slice's
		MapMade  int
		MapReuse bool
	}
	tests := map[string]struct {
		made, n int
		want    got
	}{
		"the same":            {made: 1000, n: 1000, want: got{Kept: true, Cap: 1000, MapMade: 1000, MapReuse: true}},
		"a quarter":           {made: 1000, n: 250, want: got{Kept: true, Cap: 1000, MapMade: 1000, MapReuse: true}},
		"under a quarter":     {made: 1000, n: 249, want: got{Cap: 280, MapMade: 249}},
		"one more":            {made: 1000, n: 1001, want: got{Cap: 1126, MapMade: 1001, MapReuse: true}},
		"none, none kept":     {made: 0, n: 0, want: got{Kept: true, MapMade: 0, MapReuse: true}},
		"none, some kept":     {made: 8, n: 0, want: got{MapMade: 0}},
		"some, none kept yet": {made: 0, n: 10, want: got{Cap: 11, MapMade: 10, MapReuse: true}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			s := make([]int, min(3, tt.made), tt.made)
			r := reused(s, tt.n)
			m := map[int]int{1: 1}
			made := tt.made
			e := emptied(m, &made, tt.n)
			g := got{Kept: cap(s) == cap(r) && (cap(s) == 0 || unsafe.SliceData(s) == unsafe.SliceData(r)), Cap: cap(r), MapMade: made,
				MapReuse: len(e) == 0 && len(m) == 0}
			if len(r) != 0 {
				t.Errorf("reused: %d elements, want none", len(r))
			}
			if diff := cmp.Diff(tt.want, g); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestSameHoldings: holdings are the same when every one is equal to the other's at its place: pod, key,
// allocation and start (the same instant).
func TestSameHoldings(t *testing.T) {
	h := Holding{Pod: "uid-a", Key: aliceMIG, Allocated: 3.0 / 7, Since: t0}
	with := func(f func(*Holding)) []Holding {
		o := h
		f(&o)
		return []Holding{o}
	}
	tests := map[string]struct {
		a, b []Holding
		want bool
	}{
		"none":                  {want: true},
		"equal":                 {a: []Holding{h, h}, b: []Holding{h, h}, want: true},
		"start in another zone": {a: []Holding{h}, b: with(func(o *Holding) { o.Since = t0.In(time.FixedZone("X", 3600)) }), want: true},
		"one more":              {a: []Holding{h}, b: []Holding{h, h}},
		"another pod":           {a: []Holding{h}, b: with(func(o *Holding) { o.Pod = "uid-b" })},
		"another class":         {a: []Holding{h}, b: with(func(o *Holding) { o.Class = "mig 1g.5gb" })},
		"another allocation":    {a: []Holding{h}, b: with(func(o *Holding) { o.Allocated = 1 })},
		"another start":         {a: []Holding{h}, b: with(func(o *Holding) { o.Since = t0.Add(time.Second) })},
	}
	for name, tt := range tests {
		if got := sameHoldings(&yield.Pass{}, tt.a, tt.b); got != tt.want {
			t.Errorf("%s: sameHoldings = %v, want %v", name, got, tt.want)
		}
	}
}

// TestFollowCheckpointScratch: a follower's checkpoint is the store's at every tick, whatever the writer's pods
// did; when the held rows did not change it is the last checkpoint's Held itself (the memory read into is kept),
// when they did it is the memory read into (given up); an unchanged row's strings are the last checkpoint's; and
// no checkpoint it published changes afterwards, nor is it in the follower's scratch.
func TestFollowCheckpointScratch(t *testing.T) {
	base := scratchPods(0, 1000)
	changed := scratchPods(0, 1000)
	for i := range changed {
		changed[i].Allocated = 0.5
	}
	tests := []struct {
		name       string
		samples    []Sample
		wantShared bool // the follower's Held is its last one's
	}{
		{name: "first", samples: base},
		{name: "steady", samples: base, wantShared: true},
		{name: "steady again", samples: base, wantShared: true},
		{name: "more pods", samples: append(scratchPods(0, 1000), scratchPods(1000, 200)...)},
		{name: "fewer pods", samples: scratchPods(200, 700)},
		{name: "steady with fewer", samples: scratchPods(200, 700), wantShared: true},
		{name: "no pods", samples: nil},
		{name: "still none", samples: nil, wantShared: true},
		{name: "back", samples: base},
		{name: "other allocations", samples: changed},
		{name: "steady with other allocations", samples: changed, wantShared: true},
	}
	ctx := context.Background()
	db := testDatabase(t)
	s := db()
	writer, err := New(ctx, s, Options{Interval: interval}, t0)
	if err != nil {
		t.Fatal(err)
	}
	follower, err := New(ctx, db(), Options{Interval: interval}, t0)
	if err != nil {
		t.Fatal(err)
	}
	type published struct {
		name     string
		cp, want Checkpoint
	}
	var all []published
	for i, tt := range tests {
		at := t0.Add(time.Duration(i) * interval)
		if _, err := writer.Record(ctx, at, tt.samples); err != nil {
			t.Fatal(err)
		}
		prev, _ := follower.Checkpoint()
		if err := follower.Follow(ctx, at.Add(time.Second), tt.samples); err != nil {
			t.Fatal(err)
		}
		cp, _ := follower.Checkpoint()
		stored, _, err := s.Checkpoint(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(stored, cp); diff != "" {
			t.Fatalf("%s: the follower's checkpoint vs the store's (-store +follower):\n%s", tt.name, diff)
		}
		shared := len(cp.Held) > 0 && unsafe.SliceData(cp.Held) == unsafe.SliceData(prev.Held) || len(cp.Held) == 0 && len(prev.Held) == 0
		if shared != tt.wantShared {
			t.Errorf("%s: the follower's Held is the last one's: %v, want %v", tt.name, shared, tt.wantShared)
		}
		scratch := follower.followHeld
		if overlaps(cp.Held, scratch.held) || overlaps(cp.Held, scratch.sortBuf) {
			t.Fatalf("%s: the follower's Held is in its scratch", tt.name)
		}
		for _, h := range cp.Held {
			i, found := slices.BinarySearchFunc(prev.Held, h, compareHoldings)
			if found && (unsafe.StringData(h.Pod) != unsafe.StringData(prev.Held[i].Pod) ||
				unsafe.StringData(h.Class) != unsafe.StringData(prev.Held[i].Class)) {
				t.Fatalf("%s: %s/%s was held before, but its strings are new", tt.name, h.Pod, h.Class)
			}
		}
		want := cp
		want.Held, want.Left = slices.Clone(cp.Held), slices.Clone(cp.Left)
		all = append(all, published{name: tt.name, cp: cp, want: want})
	}
	for _, p := range all {
		if diff := cmp.Diff(p.want, p.cp); diff != "" {
			t.Errorf("%s: the checkpoint changed after later ticks (-then +now):\n%s", p.name, diff)
		}
	}
	if diff := cmp.Diff(writer.UserWindows("user00001"), follower.UserWindows("user00001"), approx); diff != "" {
		t.Errorf("the follower's windows are not the writer's (-writer +follower):\n%s", diff)
	}
}

// TestInOpenTransaction: neither driver.ErrBadConn nor a panic reaches sql.Conn.Raw from the increments' writer
// (Raw would close the Conn, which waits for the open transaction: a hang); other errors pass as they are.
func TestInOpenTransaction(t *testing.T) {
	other := errors.New("disk full")
	tests := map[string]struct {
		f       func() error
		wantErr string
		wantIs  error
	}{
		"nil":         {f: func() error { return nil }},
		"other error": {f: func() error { return other }, wantErr: "disk full", wantIs: other},
		"bad conn":    {f: func() error { return fmt.Errorf("exec: %w", driver.ErrBadConn) }, wantErr: "sqlite connection: exec: driver: bad connection"},
		"panic":       {f: func() error { panic("index out of range") }, wantErr: "panic while writing the increments: index out of range"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := inOpenTransaction(tc.f)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if diff := cmp.Diff(tc.wantErr, got); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
			if errors.Is(err, driver.ErrBadConn) {
				t.Errorf("%v matches driver.ErrBadConn", err)
			}
			if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
				t.Errorf("%v does not wrap %v", err, tc.wantIs)
			}
		})
	}
}
