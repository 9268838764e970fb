package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Histogram sizes of a ProfileDay: fixed, so that a server's day costs the same whatever it ran.
const (
	// MemoryBins: samples by GPU memory used in hundredths of the memory held (the last bin: all of it or more).
	MemoryBins = 101
	// SMBins: busy samples by SM utilization in whole percent (bin i holds [i, i+1); the last bin: 100).
	SMBins = 101
)

// ProfileDay is one server's measured GPU use on one UTC day, on one GPU class: what right-size advice (issue 38)
// is computed from. Days are merged into a period (24 h, 7 d, 30 d); rows older than the retention are deleted.
type ProfileDay struct {
	User, Server, Class string
	Day                 time.Time // UTC midnight
	Kind, Product       string
	// MemoryTotalBytes, HeldGPUs and Scale describe what the server held (the last sample's): memory of its
	// units, GPU-equivalents, and the utilization scale (what its SM utilization is a fraction of, in GPUs).
	MemoryTotalBytes uint64
	HeldGPUs, Scale  float64
	First, Last      time.Time
	// HeldS is the time held; BusyS the part with the GPU busy; UnknownS the part whose utilization was unknown.
	HeldS, BusyS, UnknownS float64
	// ContendedS is the busy time during which another server on the same physical GPU (a time-sliced or MPS
	// replica's neighbours) was busy too.
	ContendedS      float64
	BusySamples     int64
	PeakMemoryBytes uint64
	Simulated       bool
	MemoryHist      []uint32 // MemoryBins counts, over every sample whose memory was known
	SMHist          []uint32 // SMBins counts, over busy samples
}

// PutProfiles writes days (replacing the rows of the same server, class and day) and deletes every day before
// keepFrom, in one transaction.
func (s *Store) PutProfiles(ctx context.Context, days []ProfileDay, keepFrom time.Time) (err error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin profile transaction: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	for b := range slices.Chunk(days, profileBatch) {
		if _, err = tx.ExecContext(ctx, s.profileUpsert(len(b)), profileArgs(b)...); err != nil {
			return fmt.Errorf("write profiles: %w", err)
		}
	}
	if _, err = tx.ExecContext(ctx, s.q(`DELETE FROM rightsize_profile WHERE day < ?`), keepFrom.Unix()); err != nil {
		return fmt.Errorf("delete old profiles: %w", err)
	}
	if err = tx.Commit(); err != nil {
		return fmt.Errorf("commit profiles: %w", err)
	}
	return nil
}

// profileBatch is how many days one statement writes: 2,000 servers are 8 round trips, not 2,000, and its
// 5,000 parameters stay far under SQLite's (32,766) and PostgreSQL's (65,535) limits.
const profileBatch = 250

const profileCols = 20

// profileUpsert is the statement that writes n days, replacing the rows of the same key.
func (s *Store) profileUpsert(n int) string {
	var b strings.Builder
	b.WriteString(`INSERT INTO rightsize_profile (user_name, server, class, day, kind, product, memory_total, held_gpus, scale,
		first_ns, last_ns, held_s, busy_s, unknown_s, contended_s, busy_samples, peak_memory, simulated, memory_hist, sm_hist) VALUES `)
	row := "(" + strings.Repeat("?, ", profileCols-1) + "?)"
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(row)
	}
	b.WriteString(` ON CONFLICT (user_name, server, class, day) DO UPDATE SET kind = excluded.kind, product = excluded.product,
		memory_total = excluded.memory_total, held_gpus = excluded.held_gpus, scale = excluded.scale,
		first_ns = excluded.first_ns, last_ns = excluded.last_ns, held_s = excluded.held_s, busy_s = excluded.busy_s,
		unknown_s = excluded.unknown_s, contended_s = excluded.contended_s, busy_samples = excluded.busy_samples, peak_memory = excluded.peak_memory,
		simulated = excluded.simulated, memory_hist = excluded.memory_hist, sm_hist = excluded.sm_hist`)
	return s.q(b.String())
}

// profileArgs are the parameters of profileUpsert for days, in its column order.
func profileArgs(days []ProfileDay) []any {
	args := make([]any, 0, len(days)*profileCols)
	for _, d := range days {
		sim := 0
		if d.Simulated {
			sim = 1
		}
		args = append(args, d.User, d.Server, d.Class, d.Day.Unix(), d.Kind, d.Product,
			int64(d.MemoryTotalBytes), d.HeldGPUs, d.Scale, d.First.UnixNano(), d.Last.UnixNano(), d.HeldS, d.BusyS,
			d.UnknownS, d.ContendedS, d.BusySamples, int64(d.PeakMemoryBytes), sim, encodeHist(d.MemoryHist), encodeHist(d.SMHist))
	}
	return args
}

// Profiles reads the days from the day of from on, of one user ("" for everyone), ordered by user, server,
// class and day.
func (s *Store) Profiles(ctx context.Context, from time.Time, user string) ([]ProfileDay, error) {
	var out []ProfileDay
	err := s.ScanProfiles(ctx, from, user, func(d *ProfileDay) error {
		c := *d
		c.MemoryHist, c.SMHist = slices.Clone(d.MemoryHist), slices.Clone(d.SMHist)
		out = append(out, c)
		return nil
	})
	return out, err
}

// ScanProfiles calls fn with each day from the day of from on, of one user ("" for everyone), ordered by user,
// server, class and day, without keeping them: the day passed (and its histograms) is reused for the next row,
// so fn copies what it keeps. Everyone's month is 30 rows a server; read this way it costs one row's memory.
func (s *Store) ScanProfiles(ctx context.Context, from time.Time, user string, fn func(*ProfileDay) error) error {
	query := `SELECT user_name, server, class, day, kind, product, memory_total, held_gpus, scale, first_ns, last_ns,
		held_s, busy_s, unknown_s, contended_s, busy_samples, peak_memory, simulated, memory_hist, sm_hist
		FROM rightsize_profile WHERE day >= ?`
	args := []any{DayOf(from).Unix()}
	if user != "" {
		query += ` AND user_name = ?`
		args = append(args, user)
	}
	query += ` ORDER BY user_name, server, class, day`
	rows, err := s.db.QueryContext(ctx, s.q(query), args...)
	if err != nil {
		return fmt.Errorf("read profiles: %w", err)
	}
	defer func() { _ = rows.Close() }()
	d := ProfileDay{MemoryHist: make([]uint32, MemoryBins), SMHist: make([]uint32, SMBins)}
	var day, firstNS, lastNS, memTotal, peak int64
	var sim int
	var memHist, smHist sql.RawBytes
	for rows.Next() {
		if err := rows.Scan(&d.User, &d.Server, &d.Class, &day, &d.Kind, &d.Product, &memTotal, &d.HeldGPUs, &d.Scale,
			&firstNS, &lastNS, &d.HeldS, &d.BusyS, &d.UnknownS, &d.ContendedS, &d.BusySamples, &peak, &sim, &memHist, &smHist); err != nil {
			return fmt.Errorf("read profiles: %w", err)
		}
		d.Day, d.First, d.Last = time.Unix(day, 0).UTC(), time.Unix(0, firstNS).UTC(), time.Unix(0, lastNS).UTC()
		d.MemoryTotalBytes, d.PeakMemoryBytes, d.Simulated = uint64(max(memTotal, 0)), uint64(max(peak, 0)), sim != 0
		if err := decodeHist(memHist, d.MemoryHist); err != nil {
			return err
		}
		if err := decodeHist(smHist, d.SMHist); err != nil {
			return err
		}
		if err := fn(&d); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read profiles: %w", err)
	}
	return nil
}

// DayOf is the UTC day t falls on.
func DayOf(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

// encodeHist writes counts as decimal numbers joined by commas, trailing zeros left out.
func encodeHist(h []uint32) string {
	n := len(h)
	for n > 0 && h[n-1] == 0 {
		n--
	}
	parts := make([]string, n)
	for i, c := range h[:n] {
		parts[i] = strconv.FormatUint(uint64(c), 10)
	}
	return strings.Join(parts, ",")
}

// decodeHist reads encodeHist's text into h (its length is the number of bins), without allocating.
func decodeHist(s []byte, h []uint32) error {
	clear(h)
	if len(s) == 0 {
		return nil
	}
	i, c, digits := 0, uint64(0), 0
	for k := 0; k <= len(s); k++ {
		if k < len(s) && s[k] != ',' {
			if s[k] < '0' || s[k] > '9' {
				return fmt.Errorf("read profiles: histogram: %q is not a count", s[k])
			}
			c = c*10 + uint64(s[k]-'0')
			digits++
			if c > math.MaxUint32 {
				return fmt.Errorf("read profiles: histogram: a count is over %d", uint32(math.MaxUint32))
			}
			continue
		}
		if digits == 0 {
			return errors.New("read profiles: histogram: an empty count")
		}
		if i >= len(h) {
			return fmt.Errorf("read profiles: a histogram has more than %d bins", len(h))
		}
		h[i], i, c, digits = uint32(c), i+1, 0, 0
	}
	return nil
}

// PutProfiles writes right-size profile days and applies the retention (Store.PutProfiles).
func (l *Ledger) PutProfiles(ctx context.Context, days []ProfileDay, keepFrom time.Time) error {
	return l.store.PutProfiles(ctx, days, keepFrom)
}

// Profiles reads right-size profile days (Store.Profiles).
func (l *Ledger) Profiles(ctx context.Context, from time.Time, user string) ([]ProfileDay, error) {
	return l.store.Profiles(ctx, from, user)
}

// ScanProfiles streams right-size profile days (Store.ScanProfiles).
func (l *Ledger) ScanProfiles(ctx context.Context, from time.Time, user string, fn func(*ProfileDay) error) error {
	return l.store.ScanProfiles(ctx, from, user, fn)
}
