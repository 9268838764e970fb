// Package ledger is the durable GPU-hours ledger: allocated and used GPU-seconds per (user, kind, class, hour
// bucket), integrated at the sampling interval and committed together with a checkpoint in one transaction,
// in embedded SQLite (default) or PostgreSQL. The same database keeps gpu-quota's waitlist state (waitlist.go):
// the usage API is its one writer.
package ledger

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
	"modernc.org/sqlite"               // registers the "sqlite" database/sql driver (pure Go)
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/gpuhub/gpuhub/services/internal/gpu"
	"github.com/gpuhub/gpuhub/services/internal/yield"
)

// ErrConflict means the checkpoint moved under us: another writer shares the database.
var ErrConflict = errors.New("ledger checkpoint moved: another writer uses this database")

// Key is what the ledger accounts by.
type Key struct {
	User  string
	Kind  gpu.Kind // stored as its string ("gpu", "mig-shared"): see gpu.Kinds
	Class string   // e.g. "mig A100-SXM4-40GB 3g.20gb"
}

// Totals are GPU-seconds (in the store) or GPU-hours (in answers), by what is known of them.
type Totals struct {
	Allocated float64 `json:"allocated"`
	// Used is GPU time kept busy (the fraction of a physical GPU, see services/usage-api/README.md "Utilization
	// and used") over the part where utilization was known.
	Used float64 `json:"used"`
	// UsedUnknown is the allocated part whose utilization was unknown (MIG without DCGM, stale agent).
	UsedUnknown float64 `json:"usedUnknown"`
}

func (t *Totals) add(o Totals) {
	t.Allocated += o.Allocated
	t.Used += o.Used
	t.UsedUnknown += o.UsedUnknown
}

func (t Totals) scale(f float64) Totals {
	return Totals{Allocated: t.Allocated * f, Used: t.Used * f, UsedUnknown: t.UsedUnknown * f}
}

// Increment adds GPU-seconds to one key in one hour bucket.
type Increment struct {
	Key
	Bucket time.Time // start of the hour, UTC
	Totals
}

// Checkpoint is the ledger's integration state, committed atomically with the increments.
type Checkpoint struct {
	At    time.Time // last integrated instant
	Ticks int64
	// Sums of every increment ever committed, in GPU-seconds: they must equal the sums over the usage table.
	Sums Totals
	// GapSeconds is wall time after an outage longer than the gap limit over which some holding was unknown
	// (a pod ended at an unknown moment, a pod without a start time) and not charged.
	GapSeconds float64
	// Held is what the pods held at At, sorted by pod and key: after an outage, a pod held then and still held
	// is charged for all of it.
	Held []Holding
	// Left lists, sorted by pod, every pod that stopped being held at or after LeftSince and is not held at At,
	// with the instant it was charged until. With it a pod seen for the first time is charged from its start
	// (nothing was charged for it yet) and a pod that comes back (a writer whose informer lagged missed it) from
	// where its charge stopped: it ran all along. LeftSince is zero in a checkpoint written before Left existed.
	Left      []Departure
	LeftSince time.Time
}

// Departure is a pod that stopped being held (see Checkpoint.Left).
type Departure struct {
	Pod   string    // UID
	Until time.Time // the last instant charged for it
}

// departed returns when the pod's charge stopped, if it is in Left.
func (cp *Checkpoint) departed(pod string) (time.Time, bool) {
	i, found := slices.BinarySearchFunc(cp.Left, pod, func(d Departure, pod string) int { return strings.Compare(d.Pod, pod) })
	if !found {
		return time.Time{}, false
	}
	return cp.Left[i].Until, true
}

// Holding is what one pod held of one key at a checkpoint.
type Holding struct {
	Pod string // UID
	Key
	Allocated float64
	Since     time.Time // when the pod started holding; zero when unknown
}

// holds reports whether pod held anything at the checkpoint.
func (cp *Checkpoint) holds(pod string) bool {
	_, found := slices.BinarySearchFunc(cp.Held, pod, func(h Holding, pod string) int { return strings.Compare(h.Pod, pod) })
	return found
}

func (h Holding) equal(o Holding) bool {
	return h.Pod == o.Pod && h.Key == o.Key && h.Allocated == o.Allocated && h.Since.Equal(o.Since)
}

// Row is one line of a Sum answer, in GPU-seconds.
type Row struct {
	Key
	Totals
}

// Usage is one line of a Breakdown answer: a Row and its held time nobody used, hour bucket by hour bucket (as
// HourTotals.Idle).
type Usage struct {
	Row
	Idle float64
}

// idleSQL sums, row by row (one user, class and hour bucket each), the held time that was neither used nor of
// unknown use.
const idleSQL = `SUM(CASE WHEN allocated_s > used_s + unknown_s THEN allocated_s - used_s - unknown_s ELSE 0 END)`

// Store is the SQL store, SQLite or PostgreSQL.
type Store struct {
	db       *sql.DB
	postgres bool
}

const schema = `
CREATE TABLE IF NOT EXISTS gpu_usage (
	user_name   TEXT NOT NULL,
	kind        TEXT NOT NULL,
	class       TEXT NOT NULL,
	bucket      BIGINT NOT NULL,
	allocated_s DOUBLE PRECISION NOT NULL DEFAULT 0,
	used_s      DOUBLE PRECISION NOT NULL DEFAULT 0,
	unknown_s   DOUBLE PRECISION NOT NULL DEFAULT 0,
	PRIMARY KEY (user_name, kind, class, bucket)
);
CREATE INDEX IF NOT EXISTS gpu_usage_bucket ON gpu_usage (bucket);
CREATE TABLE IF NOT EXISTS ledger_checkpoint (
	id          INTEGER PRIMARY KEY,
	at_ns       BIGINT NOT NULL,
	ticks       BIGINT NOT NULL,
	allocated_s DOUBLE PRECISION NOT NULL,
	used_s      DOUBLE PRECISION NOT NULL,
	unknown_s   DOUBLE PRECISION NOT NULL,
	gap_s       DOUBLE PRECISION NOT NULL
);
CREATE TABLE IF NOT EXISTS ledger_held (
	pod         TEXT NOT NULL,
	user_name   TEXT NOT NULL,
	kind        TEXT NOT NULL,
	class       TEXT NOT NULL,
	allocated   DOUBLE PRECISION NOT NULL,
	since_ns    BIGINT NOT NULL,
	PRIMARY KEY (pod, user_name, kind, class)
);
CREATE TABLE IF NOT EXISTS ledger_left (
	pod         TEXT PRIMARY KEY,
	until_ns    BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS rightsize_profile (
	user_name     TEXT NOT NULL,
	server        TEXT NOT NULL,
	class         TEXT NOT NULL,
	day           BIGINT NOT NULL,
	kind          TEXT NOT NULL,
	product       TEXT NOT NULL,
	memory_total  BIGINT NOT NULL,
	held_gpus     DOUBLE PRECISION NOT NULL,
	scale         DOUBLE PRECISION NOT NULL,
	first_ns      BIGINT NOT NULL,
	last_ns       BIGINT NOT NULL,
	held_s        DOUBLE PRECISION NOT NULL,
	busy_s        DOUBLE PRECISION NOT NULL,
	unknown_s     DOUBLE PRECISION NOT NULL,
	contended_s   DOUBLE PRECISION NOT NULL,
	busy_samples  BIGINT NOT NULL,
	peak_memory   BIGINT NOT NULL,
	simulated     INTEGER NOT NULL,
	memory_hist   TEXT NOT NULL,
	sm_hist       TEXT NOT NULL,
	PRIMARY KEY (user_name, server, class, day)
);
CREATE INDEX IF NOT EXISTS rightsize_profile_day ON rightsize_profile (day);
CREATE TABLE IF NOT EXISTS waitlist_state (
	id            INTEGER PRIMARY KEY,
	version       BIGINT NOT NULL,
	state         TEXT NOT NULL,
	updated_at_ns BIGINT NOT NULL
);
`

// Open opens the store named by dsn: a postgres:// or postgresql:// URL, else a SQLite file path.
func Open(ctx context.Context, dsn string) (*Store, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		return OpenPostgres(ctx, dsn)
	}
	return OpenSQLite(ctx, dsn)
}

// OpenSQLite opens (creating if needed) a SQLite ledger at path in WAL mode. WAL with synchronous=NORMAL is
// durable against a process crash (kill -9); only a power loss can drop the last commits.
func OpenSQLite(ctx context.Context, path string) (*Store, error) {
	dsn := "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("open sqlite ledger: %w", err)
	}
	// One writer at a time is SQLite's model; a few readers run beside it in WAL mode.
	db.SetMaxOpenConns(4)
	s := &Store{db: db}
	// The first connection to a new file turns it to WAL, which needs the file alone and answers SQLITE_BUSY
	// at once, without the busy timeout, when another process opens it at that moment: try again a few times.
	for wait := 10 * time.Millisecond; ; wait *= 2 {
		err = s.migrate(ctx)
		if err == nil || !isBusy(err) || wait > time.Second {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	return s, nil
}

// isBusy says err is SQLite's SQLITE_BUSY (or one of its extended codes).
func isBusy(err error) bool {
	var e *sqlite.Error
	return errors.As(err, &e) && e.Code()&0xff == sqlite3.SQLITE_BUSY
}

// OpenPostgres opens a PostgreSQL ledger.
func OpenPostgres(ctx context.Context, url string) (*Store, error) {
	db, err := sql.Open("pgx", url)
	if err != nil {
		return nil, fmt.Errorf("open postgres ledger: %w", err)
	}
	db.SetMaxOpenConns(8)
	s := &Store{db: db, postgres: true}
	if err := s.migrate(ctx); err != nil {
		_ = db.Close()
		return nil, err
	}
	return s, nil
}

// migrateLock names the PostgreSQL advisory lock that serialises schema migrations (any constant works; this
// one spells "gpuhub").
const migrateLock = 0x677075687562

// migrate creates the schema and adds what later releases added, in one transaction: replicas that start
// together each migrate, and the second must find the first one's work done, not half of it. SQLite's
// transactions are immediate (_txlock), so the first opener holds the write lock; PostgreSQL takes an advisory
// lock, since two concurrent CREATE TABLE IF NOT EXISTS can both miss the table and one then fails.
func (s *Store) migrate(ctx context.Context) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrate ledger schema: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	if s.postgres {
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, migrateLock); err != nil {
			return fmt.Errorf("migrate ledger schema: %w", err)
		}
	}
	for stmt := range strings.SplitSeq(schema, ";") {
		if strings.TrimSpace(stmt) == "" {
			continue
		}
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("create ledger schema: %w", err)
		}
	}
	// Added after the first release: a ledger created before it gets the column, 0 (Left unknown) in its row.
	add := `ALTER TABLE ledger_checkpoint ADD COLUMN IF NOT EXISTS left_since_ns BIGINT NOT NULL DEFAULT 0`
	if !s.postgres {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM pragma_table_info('ledger_checkpoint') WHERE name = 'left_since_ns'`).Scan(&n); err != nil {
			return fmt.Errorf("migrate ledger schema: %w", err)
		}
		add = strings.Replace(add, "IF NOT EXISTS ", "", 1) // SQLite has no IF NOT EXISTS here
		if n > 0 {
			add = ""
		}
	}
	if add != "" {
		if _, err := tx.ExecContext(ctx, add); err != nil {
			return fmt.Errorf("migrate ledger schema: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrate ledger schema: %w", err)
	}
	return nil
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// Ping checks the database answers (readiness).
func (s *Store) Ping(ctx context.Context) error { return s.db.PingContext(ctx) }

// q rewrites ? placeholders to $n for PostgreSQL.
func (s *Store) q(query string) string {
	if !s.postgres {
		return query
	}
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Checkpoint returns the integration state; ok is false for a new ledger.
func (s *Store) Checkpoint(ctx context.Context) (cp Checkpoint, ok bool, err error) {
	return s.checkpoint(ctx, nil, nil)
}

// heldScratch is the memory a follower reads the held rows into and sorts them through at every tick (see
// Store.checkpoint), kept from tick to tick by its Ledger (used under mu only): at 20,000 pods reading them into
// new memory made some 13 MB of garbage a tick.
type heldScratch struct {
	held, sortBuf []Holding
}

// checkpoint is Checkpoint for a follower, which reads it at every tick: a held row equal (same pod and key) to
// one of prev's takes prev's strings, so that unchanged rows keep no strings of their own (prev's are immutable);
// with scratch, the rows are read into scratch.held and, when they hold what prev.Held holds, prev.Held itself is
// returned and scratch.held kept for the next tick; otherwise scratch.held is returned as the Held and given up
// (set to nil): readers share a checkpoint's Held, which is never written to. prev and scratch may be nil.
func (s *Store) checkpoint(ctx context.Context, prev *Checkpoint, scratch *heldScratch) (cp Checkpoint, ok bool, err error) {
	// One transaction, so that the checkpoint row and the held rows are of the same commit.
	var opts *sql.TxOptions
	if s.postgres {
		opts = &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true}
	}
	tx, err := s.db.BeginTx(ctx, opts)
	if err != nil {
		return Checkpoint{}, false, fmt.Errorf("read ledger checkpoint: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	var atNS, leftSinceNS int64
	err = tx.QueryRowContext(ctx, s.q(`SELECT at_ns, ticks, allocated_s, used_s, unknown_s, gap_s, left_since_ns FROM ledger_checkpoint WHERE id = 1`)).
		Scan(&atNS, &cp.Ticks, &cp.Sums.Allocated, &cp.Sums.Used, &cp.Sums.UsedUnknown, &cp.GapSeconds, &leftSinceNS)
	if errors.Is(err, sql.ErrNoRows) {
		return Checkpoint{}, false, nil
	}
	if err != nil {
		return Checkpoint{}, false, fmt.Errorf("read ledger checkpoint: %w", err)
	}
	cp.At = time.Unix(0, atNS).UTC()
	if leftSinceNS != 0 {
		cp.LeftSince = time.Unix(0, leftSinceNS).UTC()
	}
	rows, err := tx.QueryContext(ctx, `SELECT pod, user_name, kind, class, allocated, since_ns FROM ledger_held ORDER BY pod, user_name, kind, class`)
	if err != nil {
		return Checkpoint{}, false, fmt.Errorf("read ledger holdings: %w", err)
	}
	defer func() { _ = rows.Close() }()
	var prevHeld, held []Holding
	if prev != nil {
		prevHeld = prev.Held
	}
	if scratch != nil {
		held = reused(scratch.held, len(prevHeld))
	}
	// Scanned into variables declared once: a Holding declared in the loop escaped, one allocation a row. Every
	// column is NOT NULL, so each Scan sets them all.
	var h Holding
	var sinceNS int64
	dest := []any{&h.Pod, &h.User, (*string)(&h.Kind), &h.Class, &h.Allocated, &sinceNS}
	next := 0           // where in prevHeld the next row is looked for first
	var pace yield.Pass // a follower reads the checkpoint every tick: let the API's requests run between rows
	for rows.Next() {
		pace.Item()
		if err := rows.Scan(dest...); err != nil {
			return Checkpoint{}, false, fmt.Errorf("scan ledger holding: %w", err)
		}
		h.Since = time.Time{}
		if sinceNS != 0 {
			h.Since = time.Unix(0, sinceNS).UTC()
		}
		next = sharePrevStrings(&h, prevHeld, next)
		held = append(held, h)
	}
	if err := rows.Err(); err != nil {
		return Checkpoint{}, false, fmt.Errorf("read ledger holdings: %w", err)
	}
	switch {
	case scratch == nil:
		sortHoldings(held, nil)
		cp.Held = held
	case len(held) == 0:
		scratch.held = held
	default:
		sortHoldings(held, &scratch.sortBuf)
		if sameHoldings(&pace, held, prevHeld) {
			scratch.held, cp.Held = held, prevHeld
		} else {
			scratch.held, cp.Held = nil, held
		}
	}
	left, err := tx.QueryContext(ctx, `SELECT pod, until_ns FROM ledger_left`)
	if err != nil {
		return Checkpoint{}, false, fmt.Errorf("read ledger departures: %w", err)
	}
	defer func() { _ = left.Close() }()
	var d Departure
	var untilNS int64
	leftDest := []any{&d.Pod, &untilNS}
	for left.Next() {
		if err := left.Scan(leftDest...); err != nil {
			return Checkpoint{}, false, fmt.Errorf("scan ledger departure: %w", err)
		}
		d.Until = time.Unix(0, untilNS).UTC()
		cp.Left = append(cp.Left, d)
	}
	if err := left.Err(); err != nil {
		return Checkpoint{}, false, fmt.Errorf("read ledger departures: %w", err)
	}
	sortDepartures(cp.Left)
	return cp, true, nil
}

// sharePrevStrings points h's strings at those of prev's holding of the same pod and key, if there is one (prev
// sorted by sortHoldings), looked for at prev[next] first: on a steady tick the rows come in prev's order. It
// returns where to look for the row after h. Otherwise h keeps its own strings.
func sharePrevStrings(h *Holding, prev []Holding, next int) int {
	i := next
	if i >= len(prev) || prev[i].Pod != h.Pod || prev[i].Key != h.Key {
		var found bool
		if i, found = slices.BinarySearchFunc(prev, *h, compareHoldings); !found {
			return next
		}
	}
	h.Pod, h.Key = prev[i].Pod, prev[i].Key
	return i + 1
}

// sortDepartures orders departures by byte order of pod (see sortHoldings).
func sortDepartures(ds []Departure) {
	slices.SortFunc(ds, func(a, b Departure) int { return strings.Compare(a.Pod, b.Pod) })
}

// rowsPerInsert bounds one multi-row INSERT (7 parameters a row, well under SQLite's and PostgreSQL's limits).
const rowsPerInsert = 400

// Commit adds incs and moves the checkpoint from prev (nil for a new ledger) to next, in one transaction. If the
// stored checkpoint is not prev, nothing is written and ErrConflict is returned: increments are never applied
// twice.
func (s *Store) Commit(ctx context.Context, prev *Checkpoint, next Checkpoint, incs []Increment) (err error) {
	// On SQLite the increments are written on the driver's connection (sqliteRunner): the transaction is begun on
	// a connection of its own, whose driver connection Raw then lends. PostgreSQL keeps DB.BeginTx, which tries
	// another connection when a pooled one turns out broken (the server restarted).
	var conn *sql.Conn
	var tx *sql.Tx
	if s.postgres {
		tx, err = s.db.BeginTx(ctx, nil)
	} else if conn, err = s.db.Conn(ctx); err == nil {
		defer func() { _ = conn.Close() }() // after the transaction's end (deferred below): Close waits for it
		tx, err = conn.BeginTx(ctx, nil)
	}
	if err != nil {
		return fmt.Errorf("begin ledger transaction: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	var res sql.Result
	if prev == nil {
		res, err = tx.ExecContext(ctx, s.q(`INSERT INTO ledger_checkpoint (id, at_ns, ticks, allocated_s, used_s, unknown_s, gap_s, left_since_ns)
			VALUES (1, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`),
			next.At.UnixNano(), next.Ticks, next.Sums.Allocated, next.Sums.Used, next.Sums.UsedUnknown, next.GapSeconds, unixNanoOrZero(next.LeftSince))
	} else {
		res, err = tx.ExecContext(ctx, s.q(`UPDATE ledger_checkpoint SET at_ns = ?, ticks = ?, allocated_s = ?, used_s = ?, unknown_s = ?, gap_s = ?, left_since_ns = ?
			WHERE id = 1 AND at_ns = ? AND ticks = ?`),
			next.At.UnixNano(), next.Ticks, next.Sums.Allocated, next.Sums.Used, next.Sums.UsedUnknown, next.GapSeconds, unixNanoOrZero(next.LeftSince),
			prev.At.UnixNano(), prev.Ticks)
	}
	if err != nil {
		return fmt.Errorf("write ledger checkpoint: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return ErrConflict
	}
	if err = s.writeHeld(ctx, tx, prev, next.Held); err != nil {
		return err
	}
	var prevLeft []Departure
	if prev != nil {
		prevLeft = prev.Left
	}
	if err = s.writeLeft(ctx, tx, prev == nil, prevLeft, next.Left); err != nil {
		return err
	}
	if conn != nil {
		err = conn.Raw(func(dc any) error {
			return inOpenTransaction(func() error {
				prep, ok := dc.(driver.ConnPrepareContext)
				if !ok {
					return fmt.Errorf("sqlite driver connection %T prepares no statements with a context", dc)
				}
				return s.writeIncrements(ctx, &sqliteRunner{conn: prep, named: make([]driver.NamedValue, 0, 7*incrementsPerStatement)}, incs)
			})
		})
	} else {
		err = s.writeIncrements(ctx, txRunner{tx}, incs)
	}
	if err != nil {
		return fmt.Errorf("write ledger increments: %w", err)
	}
	if err = tx.Commit(); err != nil {
		return fmt.Errorf("commit ledger transaction: %w", err)
	}
	return nil
}

// incrementsPerStatement is how many increments one INSERT adds: one prepared statement for all the full
// batches of a commit (SQLite parsed a 400-row statement for 3 ms, a quarter of a 10,000-user commit), and short
// enough (about 0.1 ms) that the API's requests, let in between two, never wait long for one.
const incrementsPerStatement = 64

// writeIncrements adds incs to gpu_usage, running its statements with r in the commit's transaction.
func (s *Store) writeIncrements(ctx context.Context, r statementRunner, incs []Increment) error {
	statement := func(rows int) string {
		return `INSERT INTO gpu_usage (user_name, kind, class, bucket, allocated_s, used_s, unknown_s) VALUES (?,?,?,?,?,?,?)` +
			strings.Repeat(",(?,?,?,?,?,?,?)", rows-1) + ` ON CONFLICT (user_name, kind, class, bucket) DO UPDATE SET
			allocated_s = gpu_usage.allocated_s + excluded.allocated_s,
			used_s = gpu_usage.used_s + excluded.used_s,
			unknown_s = gpu_usage.unknown_s + excluded.unknown_s`
	}
	var full preparedStatement
	if len(incs) >= incrementsPerStatement {
		var err error
		if full, err = r.prepare(ctx, s.q(statement(incrementsPerStatement))); err != nil {
			return err
		}
		defer func() { _ = full.Close() }()
	}
	args := make([]any, 0, 7*incrementsPerStatement)
	var boxes incrementBoxes
	var pace yield.Pass // let the API's requests run between two statements
	for start := 0; start < len(incs); start += incrementsPerStatement {
		pace.Item()
		chunk := incs[start:min(start+incrementsPerStatement, len(incs))]
		args = args[:0]
		for _, inc := range chunk {
			args = boxes.append(args, inc)
		}
		var err error
		if len(chunk) == incrementsPerStatement {
			err = full.exec(ctx, args)
		} else {
			err = r.exec(ctx, s.q(statement(len(chunk))), args)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// inOpenTransaction runs f inside sql.Conn.Raw while a transaction is open on that Conn. Raw closes the Conn when
// f returns driver.ErrBadConn or panics, and that close waits for the transaction to end, which waits for this
// goroutine: a hang until ctx is done (forever without a deadline). So neither leaves f: a bad connection is an
// error that does not match ErrBadConn (the transaction is rolled back and the next tick uses another), a panic an
// error that says so.
func inOpenTransaction(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic while writing the increments: %v", r)
		}
		if errors.Is(err, driver.ErrBadConn) {
			err = fmt.Errorf("sqlite connection: %v", err) //nolint:errorlint // %v, not %w: Raw must not see ErrBadConn
		}
	}()
	return f()
}

// statementRunner runs writeIncrements' statements in the commit's transaction.
type statementRunner interface {
	prepare(ctx context.Context, query string) (preparedStatement, error)
	exec(ctx context.Context, query string, args []any) error
}

type preparedStatement interface {
	exec(ctx context.Context, args []any) error
	Close() error
}

// txRunner runs them through database/sql (PostgreSQL).
type txRunner struct{ tx *sql.Tx }

func (r txRunner) prepare(ctx context.Context, query string) (preparedStatement, error) {
	st, err := r.tx.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	return txStatement{st}, nil
}

func (r txRunner) exec(ctx context.Context, query string, args []any) error {
	_, err := r.tx.ExecContext(ctx, query, args...)
	return err
}

type txStatement struct{ *sql.Stmt }

func (st txStatement) exec(ctx context.Context, args []any) error {
	_, err := st.ExecContext(ctx, args...)
	return err
}

// sqliteRunner runs them on SQLite's driver connection, lent by sql.Conn.Raw for the length of writeIncrements,
// with one slice of driver arguments for them all: database/sql copies the arguments of every Exec into a new one
// (40 bytes an argument: 5.6 MB of garbage a tick at 20,000 users).
//
// The connection is the transaction's, so the statements are part of it while the transaction is open.
// database/sql rolls it back on its own only once ctx is done, and not while Raw lends the connection; a statement
// that ran after that rollback would commit on its own, so none starts once ctx is done (sqliteStatement.exec).
type sqliteRunner struct {
	conn  driver.ConnPrepareContext
	named []driver.NamedValue
}

func (r *sqliteRunner) prepare(ctx context.Context, query string) (preparedStatement, error) {
	st, err := r.conn.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	ex, ok := st.(driver.StmtExecContext)
	if !ok {
		_ = st.Close()
		return nil, fmt.Errorf("sqlite driver statement %T executes nothing with a context", st)
	}
	return sqliteStatement{r, ex, st}, nil
}

func (r *sqliteRunner) exec(ctx context.Context, query string, args []any) error {
	st, err := r.prepare(ctx, query)
	if err != nil {
		return err
	}
	defer func() { _ = st.Close() }()
	return st.exec(ctx, args)
}

type sqliteStatement struct {
	r  *sqliteRunner
	ex driver.StmtExecContext
	driver.Stmt
}

func (st sqliteStatement) exec(ctx context.Context, args []any) error {
	if err := ctx.Err(); err != nil {
		return err // the transaction may be rolled back: the statement would run on its own
	}
	named := st.r.named[:0]
	for i, a := range args {
		named = append(named, driver.NamedValue{Ordinal: i + 1, Value: a})
	}
	st.r.named = named
	_, err := st.ex.ExecContext(ctx, named)
	return err
}

// incrementBoxes appends an increment's columns to a statement's arguments. Putting a value in an interface
// allocates it (20,000 rows a tick made some 1.6 MB of garbage); rows sorted by user mostly repeat the previous
// row's kind, class and bucket, and often its GPU-seconds, whose boxes are used again.
type incrementBoxes struct {
	kind, class              lastBox[string, string]
	bucket                   lastBox[int64, int64]
	allocated, used, unknown lastBox[float64, uint64] // by their bits: 0 and -0 are two values
}

func (b *incrementBoxes) append(args []any, inc Increment) []any {
	kind, bucket := string(inc.Kind), inc.Bucket.Unix()
	return append(args, inc.User, b.kind.box(kind, kind), b.class.box(inc.Class, inc.Class), b.bucket.box(bucket, bucket),
		b.allocated.box(inc.Allocated, math.Float64bits(inc.Allocated)), b.used.box(inc.Used, math.Float64bits(inc.Used)),
		b.unknown.box(inc.UsedUnknown, math.Float64bits(inc.UsedUnknown)))
}

// lastBox boxes a value, or returns the last one's box when their keys, which tell values apart, are equal.
type lastBox[V any, K comparable] struct {
	key   K
	boxed any
}

func (l *lastBox[V, K]) box(v V, key K) any {
	if l.boxed == nil || l.key != key {
		l.key, l.boxed = key, v
	}
	return l.boxed
}

// writeHeld moves the held rows from prev's to next (both sorted by pod), rewriting only the pods that came,
// went or changed: pods keep what they hold for their lifetime, so most ticks write nothing here.
func (s *Store) writeHeld(ctx context.Context, tx *sql.Tx, prev *Checkpoint, next []Holding) error {
	var drop []string
	var put []Holding
	if prev == nil {
		if _, err := tx.ExecContext(ctx, `DELETE FROM ledger_held`); err != nil {
			return fmt.Errorf("write ledger holdings: %w", err)
		}
		put = next
	} else {
		// Both sorted by pod: walk them together, a pod at a time.
		before, after := prev.Held, next
		for len(before) > 0 || len(after) > 0 {
			var b, a []Holding
			switch {
			case len(after) == 0 || len(before) > 0 && before[0].Pod < after[0].Pod:
				b, before = cutPod(before)
			case len(before) == 0 || after[0].Pod < before[0].Pod:
				a, after = cutPod(after)
			default:
				b, before = cutPod(before)
				a, after = cutPod(after)
				if slices.EqualFunc(b, a, Holding.equal) {
					continue
				}
			}
			if len(b) > 0 {
				drop = append(drop, b[0].Pod)
			}
			put = append(put, a...)
		}
	}
	slices.Sort(drop)
	if err := s.deletePods(ctx, tx, "ledger_held", drop); err != nil {
		return fmt.Errorf("write ledger holdings: %w", err)
	}
	err := s.insertRows(ctx, tx, `INSERT INTO ledger_held (pod, user_name, kind, class, allocated, since_ns) VALUES `, 6, len(put),
		func(i int) []any {
			h := put[i]
			return []any{h.Pod, h.User, string(h.Kind), h.Class, h.Allocated, unixNanoOrZero(h.Since)}
		})
	if err != nil {
		return fmt.Errorf("write ledger holdings: %w", err)
	}
	return nil
}

// deletePods deletes the rows of pods from table, rowsPerInsert pods a statement.
func (s *Store) deletePods(ctx context.Context, tx *sql.Tx, table string, pods []string) error {
	for start := 0; start < len(pods); start += rowsPerInsert {
		chunk := pods[start:min(start+rowsPerInsert, len(pods))]
		args := make([]any, len(chunk))
		for i, pod := range chunk {
			args[i] = pod
		}
		query := `DELETE FROM ` + table + ` WHERE pod IN (?` + strings.Repeat(",?", len(chunk)-1) + `)`
		if _, err := tx.ExecContext(ctx, s.q(query), args...); err != nil {
			return err
		}
	}
	return nil
}

// insertRows inserts n rows of width columns (row(i) is the i-th's values) with insert ("INSERT INTO t (...)
// VALUES "), rowsPerInsert rows a statement.
func (s *Store) insertRows(ctx context.Context, tx *sql.Tx, insert string, width, n int, row func(i int) []any) error {
	tuple := "(?" + strings.Repeat(",?", width-1) + ")"
	for start := 0; start < n; start += rowsPerInsert {
		end := min(start+rowsPerInsert, n)
		args := make([]any, 0, width*(end-start))
		for i := start; i < end; i++ {
			args = append(args, row(i)...)
		}
		query := insert + tuple + strings.Repeat(","+tuple, end-start-1)
		if _, err := tx.ExecContext(ctx, s.q(query), args...); err != nil {
			return err
		}
	}
	return nil
}

// writeLeft moves the departure rows from prev's to next (both sorted by pod), writing only the changes.
func (s *Store) writeLeft(ctx context.Context, tx *sql.Tx, fresh bool, prev, next []Departure) error {
	if fresh {
		if _, err := tx.ExecContext(ctx, `DELETE FROM ledger_left`); err != nil {
			return fmt.Errorf("write ledger departures: %w", err)
		}
		prev = nil
	}
	var drop []string
	var put []Departure
	for len(prev) > 0 || len(next) > 0 {
		switch {
		case len(next) == 0 || len(prev) > 0 && prev[0].Pod < next[0].Pod:
			drop, prev = append(drop, prev[0].Pod), prev[1:]
		case len(prev) == 0 || next[0].Pod < prev[0].Pod:
			put, next = append(put, next[0]), next[1:]
		default:
			if !prev[0].Until.Equal(next[0].Until) {
				drop, put = append(drop, prev[0].Pod), append(put, next[0])
			}
			prev, next = prev[1:], next[1:]
		}
	}
	if err := s.deletePods(ctx, tx, "ledger_left", drop); err != nil {
		return fmt.Errorf("write ledger departures: %w", err)
	}
	err := s.insertRows(ctx, tx, `INSERT INTO ledger_left (pod, until_ns) VALUES `, 2, len(put),
		func(i int) []any { return []any{put[i].Pod, put[i].Until.UnixNano()} })
	if err != nil {
		return fmt.Errorf("write ledger departures: %w", err)
	}
	return nil
}

func unixNanoOrZero(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// cutPod splits the first pod's holdings off hs (sorted by pod).
func cutPod(hs []Holding) (first, rest []Holding) {
	n := 1
	for n < len(hs) && hs[n].Pod == hs[0].Pod {
		n++
	}
	return hs[:n:n], hs[n:]
}

// Query selects rows of the ledger. Buckets are hours: a window [From, To) covers the buckets that start in
// [hour(From), To).
type Query struct {
	From, To time.Time
	User     string // empty: every user
}

// Sum returns GPU-seconds per key over the query's window.
func (s *Store) Sum(ctx context.Context, qr Query) ([]Row, error) {
	var out []Row
	err := s.sum(ctx, qr, false, func(u Usage) { out = append(out, u.Row) })
	return out, err
}

// breakdown is Sum with the idle time of each key.
func (s *Store) breakdown(ctx context.Context, qr Query) ([]Usage, error) {
	var out []Usage
	err := s.sum(ctx, qr, true, func(u Usage) { out = append(out, u) })
	return out, err
}

func (s *Store) sum(ctx context.Context, qr Query, idle bool, row func(Usage)) error {
	cols := `user_name, kind, class, SUM(allocated_s), SUM(used_s), SUM(unknown_s)`
	if idle {
		cols += `, ` + idleSQL
	}
	query := `SELECT ` + cols + ` FROM gpu_usage WHERE bucket >= ? AND bucket < ?`
	args := []any{qr.From.UTC().Truncate(time.Hour).Unix(), qr.To.Unix()}
	if qr.User != "" {
		query += ` AND user_name = ?`
		args = append(args, qr.User)
	}
	query += ` GROUP BY user_name, kind, class ORDER BY user_name, kind, class`
	rows, err := s.db.QueryContext(ctx, s.q(query), args...)
	if err != nil {
		return fmt.Errorf("query ledger: %w", err)
	}
	defer func() { _ = rows.Close() }()
	// Scanned into one Usage declared outside the loop: declared in it, it escaped (one allocation a row). No
	// column is NULL (SUM over a group's rows), so each Scan sets every field.
	var u Usage
	dest := []any{&u.User, (*string)(&u.Kind), &u.Class, &u.Allocated, &u.Used, &u.UsedUnknown}
	if idle {
		dest = append(dest, &u.Idle)
	}
	var pace yield.Pass // sums of 10,000 users (a follower's every tick): let other requests run between rows
	for rows.Next() {
		pace.Item()
		if err := rows.Scan(dest...); err != nil {
			return fmt.Errorf("scan ledger row: %w", err)
		}
		row(u)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("query ledger: %w", err)
	}
	return nil
}

// HourTotals are the GPU-seconds (in the store) or GPU-hours (in answers) of one hour bucket, summed over the
// users a query selects.
type HourTotals struct {
	Bucket time.Time // start of the hour, UTC
	Totals
	// Idle is the held time nobody used: per user and class, allocated minus used minus used-unknown where that
	// is positive, summed. A time-sliced share busier than it holds offsets no one else's idle GPU, and time
	// whose use is unknown is not counted as idle.
	Idle float64
}

// hourly sums the query's window bucket by bucket (buckets without rows are left out), oldest first.
func (s *Store) hourly(ctx context.Context, qr Query) ([]HourTotals, error) {
	query := `SELECT bucket, SUM(allocated_s), SUM(used_s), SUM(unknown_s), ` + idleSQL + ` FROM gpu_usage WHERE bucket >= ? AND bucket < ?`
	args := []any{qr.From.UTC().Truncate(time.Hour).Unix(), qr.To.Unix()}
	if qr.User != "" {
		query += ` AND user_name = ?`
		args = append(args, qr.User)
	}
	query += ` GROUP BY bucket ORDER BY bucket`
	rows, err := s.db.QueryContext(ctx, s.q(query), args...)
	if err != nil {
		return nil, fmt.Errorf("query ledger hours: %w", err)
	}
	defer func() { _ = rows.Close() }()
	var out []HourTotals
	for rows.Next() {
		var h HourTotals
		var b int64
		if err := rows.Scan(&b, &h.Allocated, &h.Used, &h.UsedUnknown, &h.Idle); err != nil {
			return nil, fmt.Errorf("scan ledger hours: %w", err)
		}
		h.Bucket = time.Unix(b, 0).UTC()
		out = append(out, h)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("query ledger hours: %w", err)
	}
	return out, nil
}

// userWindows sums every user's buckets from d30 on, except the current hour's, into three windows at once (one
// scan). Buckets after the current hour exist only after the wall clock stepped back; they count.
func (s *Store) userWindows(ctx context.Context, today, d7, d30, current time.Time) (map[string][3]Totals, error) {
	query := `SELECT user_name,
		SUM(CASE WHEN bucket >= ? THEN allocated_s ELSE 0 END), SUM(CASE WHEN bucket >= ? THEN used_s ELSE 0 END), SUM(CASE WHEN bucket >= ? THEN unknown_s ELSE 0 END),
		SUM(CASE WHEN bucket >= ? THEN allocated_s ELSE 0 END), SUM(CASE WHEN bucket >= ? THEN used_s ELSE 0 END), SUM(CASE WHEN bucket >= ? THEN unknown_s ELSE 0 END),
		SUM(allocated_s), SUM(used_s), SUM(unknown_s)
		FROM gpu_usage WHERE bucket >= ? AND bucket <> ? GROUP BY user_name`
	t, w, m := today.Unix(), d7.Unix(), d30.Unix()
	rows, err := s.db.QueryContext(ctx, s.q(query), t, t, t, w, w, w, m, current.Unix())
	if err != nil {
		return nil, fmt.Errorf("query ledger windows: %w", err)
	}
	defer func() { _ = rows.Close() }()
	out := map[string][3]Totals{}
	for rows.Next() {
		var u string
		var v [3]Totals
		if err := rows.Scan(&u, &v[0].Allocated, &v[0].Used, &v[0].UsedUnknown, &v[1].Allocated, &v[1].Used, &v[1].UsedUnknown,
			&v[2].Allocated, &v[2].Used, &v[2].UsedUnknown); err != nil {
			return nil, fmt.Errorf("scan ledger windows: %w", err)
		}
		out[u] = v
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("query ledger windows: %w", err)
	}
	return out, nil
}

// rollingSums sums every user's allocated GPU-seconds by class for rolling windows ending in the hour bucket
// current, in one scan: per window w, full is the buckets after current-w (the current one excepted; later ones
// exist only after the wall clock stepped back, and count) and edge is bucket current-w, the window's first,
// partly inside it.
func (s *Store) rollingSums(ctx context.Context, current time.Time, windows []time.Duration) (map[time.Duration]*RollingSums, error) {
	if len(windows) == 0 {
		return map[time.Duration]*RollingSums{}, nil
	}
	var cols strings.Builder
	args := make([]any, 0, 2*len(windows)+2)
	oldest := current
	for _, w := range windows {
		edge := current.Add(-w)
		oldest = minTime(oldest, edge)
		cols.WriteString(", SUM(CASE WHEN bucket > ? THEN allocated_s ELSE 0 END), SUM(CASE WHEN bucket = ? THEN allocated_s ELSE 0 END)")
		args = append(args, edge.Unix(), edge.Unix())
	}
	args = append(args, oldest.Unix(), current.Unix())
	query := `SELECT user_name, class` + cols.String() + ` FROM gpu_usage WHERE bucket >= ? AND bucket <> ? GROUP BY user_name, class`
	rows, err := s.db.QueryContext(ctx, s.q(query), args...)
	if err != nil {
		return nil, fmt.Errorf("query ledger rolling windows: %w", err)
	}
	defer func() { _ = rows.Close() }()
	out := make(map[time.Duration]*RollingSums, len(windows))
	for _, w := range windows {
		out[w] = &RollingSums{Full: map[string]map[string]float64{}, Edge: map[string]map[string]float64{}}
	}
	vals := make([]float64, 2*len(windows))
	dest := make([]any, 2+len(vals))
	var user, class string
	dest[0], dest[1] = &user, &class
	for i := range vals {
		dest[2+i] = &vals[i]
	}
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return nil, fmt.Errorf("scan ledger rolling windows: %w", err)
		}
		for i, w := range windows {
			addTo(out[w].Full, user, class, vals[2*i])
			addTo(out[w].Edge, user, class, vals[2*i+1])
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("query ledger rolling windows: %w", err)
	}
	return out, nil
}

// RollingSums are GPU-seconds by user and class of one rolling window, without the current hour: Full the
// buckets wholly inside it, Edge its first bucket, partly inside.
type RollingSums struct {
	Full, Edge map[string]map[string]float64
}

func addTo(m map[string]map[string]float64, user, class string, v float64) {
	if v == 0 {
		return
	}
	c := m[user]
	if c == nil {
		c = map[string]float64{}
		m[user] = c
	}
	c[class] += v
}

// bucketSums returns allocated GPU-seconds by bucket (Unix seconds), user and class of a few buckets.
func (s *Store) bucketSums(ctx context.Context, buckets []time.Time) (map[int64]map[string]map[string]float64, error) {
	out := map[int64]map[string]map[string]float64{}
	if len(buckets) == 0 {
		return out, nil
	}
	args := make([]any, len(buckets))
	for i, b := range buckets {
		args[i] = b.Unix()
	}
	query := `SELECT bucket, user_name, class, SUM(allocated_s) FROM gpu_usage WHERE bucket IN (?` +
		strings.Repeat(", ?", len(buckets)-1) + `) GROUP BY bucket, user_name, class`
	rows, err := s.db.QueryContext(ctx, s.q(query), args...)
	if err != nil {
		return nil, fmt.Errorf("query ledger buckets: %w", err)
	}
	defer func() { _ = rows.Close() }()
	for rows.Next() {
		var b int64
		var user, class string
		var v float64
		if err := rows.Scan(&b, &user, &class, &v); err != nil {
			return nil, fmt.Errorf("scan ledger buckets: %w", err)
		}
		if out[b] == nil {
			out[b] = map[string]map[string]float64{}
		}
		addTo(out[b], user, class, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("query ledger buckets: %w", err)
	}
	return out, nil
}
