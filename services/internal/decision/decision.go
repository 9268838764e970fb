// Package decision is the one record shape of what an acting gpuhub service decided (admitted, refused,
// noticed, stopped), with the numbers it decided on. Every record is logged, counted in a metric and kept in a
// bounded in-memory log that the service's decisions API lists and the admin view merges.
package decision

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Actions. Services may add their own; these are the ones the admin view knows.
const (
	ActionAdmit  = "admit"  // a spawn was allowed
	ActionDeny   = "deny"   // a spawn was refused
	ActionNotice = "notice" // the user was told an action is coming (a pod annotation)
	ActionStop   = "stop"   // a server was stopped
	ActionClear  = "clear"  // a notice was withdrawn: the user is back within the limits
	ActionSnooze = "snooze" // the user (or an admin for them) moved an announced stop later
)

// Record is one decision.
type Record struct {
	ID      string    `json:"id"`
	Time    time.Time `json:"time"`
	Service string    `json:"service"` // the Hub service that decided (gpu-quota, gpu-culler, ...)
	// Actor is who acted: the service itself, or an admin named in a request.
	Actor   string `json:"actor"`
	User    string `json:"user"`
	Server  string `json:"server"` // "" is the default server
	Action  string `json:"action"`
	Reason  string `json:"reason"`
	Message string `json:"message,omitempty"` // what the user was told
	// Numbers are what the decision looked at (limit, held, requested, budget, used, ...).
	Numbers map[string]float64 `json:"numbers,omitempty"`
}

// Options configure a Log.
type Options struct {
	Service string
	// Size is how many records are kept (default 10,000); older ones are only in the logs.
	Size   int
	Logger *slog.Logger
	// Registerer gets gpuhub_<subsystem>_decisions_total{action,reason}; nil registers nothing.
	Registerer prometheus.Registerer
	// Subsystem of the metric (default: Service without a "gpu-" prefix, "-" as "_").
	Subsystem string
	Now       func() time.Time
	// WriteDelay lets a record's log line wait up to this long, so that a burst of decisions (64 spawns at
	// once) is answered before its lines are formatted and written: the record is kept, listed and counted at
	// once either way. 0 writes each line in Record. Flush writes what waits (call it before exiting); a
	// process killed outright loses up to WriteDelay of lines, and never more than maxPending wait.
	WriteDelay time.Duration
}

// maxPending is how many lines may wait for WriteDelay; the Record that finds this many writes them itself.
const maxPending = 4096

// Log keeps the last decisions.
type Log struct {
	o     Options
	count *prometheus.CounterVec

	mu sync.Mutex
	// counters are count's children by action and reason, found once: a few of them, each used on every
	// decision of its kind.
	counters map[[2]string]prometheus.Counter
	ring     []Record // ring[next] is the oldest once full
	next     int
	full     bool
	seq      uint64
	// pending are the records whose lines wait for flushTimer (WriteDelay > 0); spare is the emptied slice of
	// the last flush, reused.
	pending, spare []Record
	flushTimer     *time.Timer

	// writing is held while a flush writes its batch: batches are taken and written in order.
	writing sync.Mutex
}

// NewLog returns an empty log.
func NewLog(o Options) (*Log, error) {
	if o.Size <= 0 {
		o.Size = 10_000
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Subsystem == "" {
		o.Subsystem = subsystem(o.Service)
	}
	l := &Log{o: o, ring: make([]Record, o.Size), counters: map[[2]string]prometheus.Counter{}}
	l.count = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "gpuhub", Subsystem: o.Subsystem, Name: "decisions_total",
		Help: "Decisions by action (admit, deny, notice, stop, clear) and reason.",
	}, []string{"action", "reason"})
	if o.Registerer != nil {
		if err := o.Registerer.Register(l.count); err != nil {
			return nil, fmt.Errorf("register decision metric: %w", err)
		}
	}
	if o.WriteDelay > 0 {
		l.flushTimer = time.AfterFunc(time.Hour, l.Flush)
		l.flushTimer.Stop()
	}
	return l, nil
}

func subsystem(service string) string {
	s := []byte(service)
	if len(s) > 4 && string(s[:4]) == "gpu-" {
		s = s[4:]
	}
	for i, c := range s {
		if c == '-' {
			s[i] = '_'
		}
	}
	return string(s)
}

// Record fills in ID, Time (when zero) and Service, logs the record with its numbers (within WriteDelay),
// counts it and keeps it.
func (l *Log) Record(r Record) Record {
	if r.Time.IsZero() {
		r.Time = l.o.Now()
	}
	r.Time = r.Time.UTC()
	r.Service = l.o.Service
	if r.Actor == "" {
		r.Actor = l.o.Service
	}
	var idb [32]byte
	l.mu.Lock()
	l.seq++
	id := strconv.AppendInt(idb[:0], r.Time.UnixMilli(), 36)
	id = append(id, '-')
	r.ID = string(strconv.AppendUint(id, l.seq, 36))
	l.ring[l.next] = r
	l.next++
	if l.next == len(l.ring) {
		l.next, l.full = 0, true
	}
	key := [2]string{r.Action, r.Reason}
	counter := l.counters[key]
	// A logger that drops info lines (--log-level warn) gets none: nothing waits for the timer then.
	deferred, backlog := l.flushTimer != nil && l.o.Logger.Enabled(context.Background(), slog.LevelInfo), false
	if deferred {
		l.pending = append(l.pending, r)
		if len(l.pending) == 1 {
			l.flushTimer.Reset(l.o.WriteDelay)
		}
		backlog = len(l.pending) >= maxPending
	}
	l.mu.Unlock()
	if counter == nil {
		// Outside the lock: WithLabelValues panics on a label that is not UTF-8, which must not leave l.mu held.
		counter = l.count.WithLabelValues(r.Action, r.Reason)
		l.mu.Lock()
		l.counters[key] = counter
		l.mu.Unlock()
	}
	counter.Inc()
	switch {
	case !deferred:
		l.log(r)
	case backlog:
		l.Flush()
	}
	return r
}

// Flush writes the log lines that wait for WriteDelay, oldest first.
func (l *Log) Flush() {
	l.writing.Lock()
	defer l.writing.Unlock()
	l.mu.Lock()
	batch := l.pending
	l.pending, l.spare = l.spare, nil
	l.mu.Unlock()
	for i := range batch {
		l.log(batch[i])
	}
	clear(batch) // the spare must not keep the records' maps alive
	l.mu.Lock()
	l.spare = batch[:0]
	l.mu.Unlock()
}

// log writes r at info. Every admission is logged, so the attributes are built without boxing: slog.Attr on
// the stack, the numbers' keys sorted in place.
func (l *Log) log(r Record) {
	ctx := context.Background()
	if !l.o.Logger.Enabled(ctx, slog.LevelInfo) {
		return
	}
	var ab [16]slog.Attr
	attrs := append(ab[:0], slog.String("id", r.ID), slog.String("action", r.Action), slog.String("reason", r.Reason),
		slog.String("user", r.User), slog.String("server", r.Server))
	if r.Actor != r.Service {
		attrs = append(attrs, slog.String("actor", r.Actor))
	}
	var kb [8]string
	keys := kb[:0]
	for k := range r.Numbers {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		attrs = append(attrs, number(k, r.Numbers[k]))
	}
	if r.Message != "" {
		attrs = append(attrs, slog.String("message", r.Message))
	}
	// The line's time is the decision's, also when it waited for WriteDelay.
	rec := slog.NewRecord(r.Time, slog.LevelInfo, "decision", 0)
	rec.AddAttrs(attrs...)
	_ = l.o.Logger.Handler().Handle(ctx, rec) // as Logger.LogAttrs: a handler's error has nowhere to go
}

// number is one of the numbers as a log attribute. Most are whole (limits, counts, seconds): those go as
// integers, which slog writes with strconv, where a float64 goes through json.Marshal (the same JSON for a
// whole number, at several times the cost on a path every admission takes).
func number(k string, v float64) slog.Attr {
	if v == math.Trunc(v) && math.Abs(v) < 1<<53 && !(v == 0 && math.Signbit(v)) {
		return slog.Int64(k, int64(v))
	}
	return slog.Float64(k, v)
}

// Filter selects records; zero fields select everything.
type Filter struct {
	User   string
	Action string
	Since  time.Time // records at or after
	Limit  int       // most records returned (newest first); 0: all kept
}

// List returns the kept records that match, newest first.
func (l *Log) List(f Filter) []Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.next
	if l.full {
		n = len(l.ring)
	}
	var out []Record
	for i := range n {
		r := l.ring[(l.next-1-i+len(l.ring))%len(l.ring)]
		if f.User != "" && r.User != f.User || f.Action != "" && r.Action != f.Action || r.Time.Before(f.Since) {
			continue
		}
		out = append(out, r)
		if f.Limit > 0 && len(out) == f.Limit {
			break
		}
	}
	return out
}
