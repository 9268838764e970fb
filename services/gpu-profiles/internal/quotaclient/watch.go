package quotaclient

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpuhub/gpuhub/services/internal/contract"
)

// gpu-quota pushes every user's verdicts (POST {quota prefix}api/v1/assess/watch): the client keeps one watch
// open for every GPU choice the forms may show, and a render whose question the table answers exactly costs no
// round trip. Anything the table cannot answer for sure (another server, other groups, a choice defined
// otherwise, a stream not in sync or silent) goes to assess as before.

// Pushed is the Result of an answer from the watched table.
const Pushed Result = "pushed"

// Defaults of the watch.
const (
	// DefaultStale is how long a watch may stay silent before its table stops answering: gpu-quota sends a
	// keepalive at least every 15 s.
	DefaultStale = 30 * time.Second
	// optionsPoll is how often the choices to watch are compared with those watched.
	optionsPoll = time.Second
	// backoffMin and backoffMax bound the wait before connecting again after a failure; a stream that was in
	// sync when it ended (a handover, a restart of gpu-quota) is followed at once.
	backoffMin = 500 * time.Millisecond
	backoffMax = 30 * time.Second
	// maxLine bounds one line: a user's verdicts on at most 512 options with their messages.
	maxLine = 4 << 20
)

// table is one stream's verdicts: every user of gpu-quota's directory for the default server.
type table struct {
	// options are the choices watched, by ID: a render asks only for those defined exactly so.
	options map[string]contract.AssessOption
	mu      sync.RWMutex
	users   map[string]*entry
	synced  atomic.Bool
	ended   atomic.Bool
	last    atomic.Int64 // when the stream last sent a line (unix ns, the client's clock)
}

// entry is one user's line; never changed once stored. Users with the same line share one entry (most users of a
// group without a GPU server have the same verdicts): 10,000 users hold a few hundred entries, not 10,000 maps.
type entry struct {
	key      string // what makes it the same (entryKey)
	groups   []string
	verdicts map[string]contract.Verdict
}

// entryKey names what an entry holds of a user line: groups and verdicts.
func entryKey(b *strings.Builder, l contract.VerdictLine) string {
	b.Reset()
	for _, g := range l.Groups {
		b.WriteString(g)
		b.WriteByte(0)
	}
	b.WriteByte(1)
	for _, v := range l.Options {
		WriteVerdictKey(b, v)
	}
	return b.String()
}

// WriteVerdictKey writes to b what tells verdict v apart from another (every field, NUL-separated): the watch's
// shared entries and the form cache (profiles.formKey) name verdicts the same way.
func WriteVerdictKey(b *strings.Builder, v contract.Verdict) {
	b.WriteString(v.ID)
	b.WriteByte(0)
	if v.Allow {
		b.WriteByte('y')
	}
	b.WriteString(v.Reason)
	b.WriteByte(0)
	b.WriteString(v.Message)
	b.WriteByte(0)
	b.WriteString(strconv.FormatInt(v.HeldForOthers, 10))
	b.WriteByte(0)
	if !v.HeldForYouUntil.IsZero() {
		b.WriteString(v.HeldForYouUntil.UTC().Format(time.RFC3339Nano))
	}
	b.WriteByte(0)
}

func newTable(opts []contract.AssessOption) *table {
	t := &table{options: make(map[string]contract.AssessOption, len(opts)), users: map[string]*entry{}}
	for _, o := range opts {
		t.options[o.ID] = o
	}
	return t
}

// alive reports whether the table answers at now: complete, its stream open and heard from within stale.
func (t *table) alive(now time.Time, stale time.Duration) bool {
	return t.synced.Load() && !t.ended.Load() && now.Sub(time.Unix(0, t.last.Load())) < stale
}

// Watching reports whether a watched table answers renders now: in sync, its stream open and heard from.
func (c *Client) Watching() bool {
	t := c.table.Load()
	return t != nil && t.alive(c.o.Now(), c.o.Stale)
}

// pushed answers Assess from the watched table when it can say exactly what assess would: the default server,
// the groups the verdicts were decided with (nil: gpu-quota's copy, as the line has them), every option
// watched with the same definition. ok is false otherwise: the caller asks gpu-quota.
func (c *Client) pushed(user, server string, groups []string, opts []contract.AssessOption) (map[string]contract.Verdict, bool) {
	t := c.table.Load()
	if t == nil || server != "" || !t.alive(c.o.Now(), c.o.Stale) {
		return nil, false
	}
	t.mu.RLock()
	e := t.users[user]
	t.mu.RUnlock()
	if e == nil || groups != nil && !sameSet(groups, e.groups) {
		return nil, false
	}
	out := make(map[string]contract.Verdict, len(opts))
	for _, o := range opts {
		w, ok := t.options[o.ID]
		if !ok || !maps.Equal(o.Resources, w.Resources) || !maps.Equal(o.NodeSelector, w.NodeSelector) {
			return nil, false
		}
		v, ok := e.verdicts[o.ID]
		if !ok {
			return nil, false
		}
		out[o.ID] = v
	}
	return out, true
}

// sameSet reports whether a and b hold the same groups, in any order.
func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for _, g := range a {
		if !slices.Contains(b, g) {
			return false
		}
	}
	for _, g := range b {
		if !slices.Contains(a, g) {
			return false
		}
	}
	return true
}

// Watch keeps a watch of verdicts open until ctx ends, for the choices options returns (ok false: none known
// yet). When they change, a new watch starts; the old table answers the choices it holds unchanged until the
// new one is in sync. A watch that ends or fails is made again, at once after one that was in sync, else
// after a backoff from 500 ms to 30 s; each failure is logged (never the token).
func (c *Client) Watch(ctx context.Context, options func() ([]contract.AssessOption, bool)) {
	var (
		cur *watcher
		wg  sync.WaitGroup // every watcher's goroutine: none outlives Watch
	)
	defer wg.Wait() // ctx ended: every watcher's context with it
	t := time.NewTicker(optionsPoll)
	defer t.Stop()
	for {
		if opts, ok := options(); ok && len(opts) > 0 {
			opts = normalized(opts)
			if key := optionsKey(opts); cur == nil || cur.key != key {
				cur = c.startWatcher(ctx, &wg, key, opts, cur)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// normalized are opts sorted by ID, each ID once (the first).
func normalized(opts []contract.AssessOption) []contract.AssessOption {
	out := slices.Clone(opts)
	slices.SortStableFunc(out, func(a, b contract.AssessOption) int { return strings.Compare(a.ID, b.ID) })
	return slices.CompactFunc(out, func(a, b contract.AssessOption) bool { return a.ID == b.ID })
}

// optionsKey names a set of normalized options with their definitions.
func optionsKey(opts []contract.AssessOption) string {
	b, _ := json.Marshal(opts) // maps are written in key order
	return string(b)
}

// watcher is the watch of one set of options, made again when it ends.
type watcher struct {
	key    string
	ctx    context.Context
	cancel context.CancelFunc
	// Under Client.installMu: served is set once its table was put in use; prev is the watcher whose table
	// renders use until then (stopped when this one's table takes over).
	served bool
	prev   *watcher
}

// startWatcher watches opts until ctx ends or a later watcher's table takes over. It takes over from last: at
// once when last never served (nothing is lost), else once its own table is in sync.
func (c *Client) startWatcher(ctx context.Context, wg *sync.WaitGroup, key string, opts []contract.AssessOption, last *watcher) *watcher {
	ctx, cancel := context.WithCancel(ctx)
	w := &watcher{key: key, ctx: ctx, cancel: cancel}
	c.installMu.Lock()
	switch {
	case last == nil:
	case last.served:
		w.prev = last
	default:
		w.prev, last.prev = last.prev, nil
		last.cancel()
	}
	c.installMu.Unlock()
	body, _ := json.Marshal(contract.VerdictWatchRequest{Options: opts})
	wg.Go(func() {
		defer cancel()
		backoff := time.Duration(0)
		for ctx.Err() == nil {
			synced, err := c.stream(ctx, body, opts, func(t *table) bool { return c.install(w, t) })
			if ctx.Err() != nil {
				return
			}
			switch {
			case synced:
				backoff = 0
				c.o.Logger.Info("gpu-quota's watch of verdicts ended; watching again", "url", c.watchEndpoint, "err", err)
			default:
				backoff = min(max(2*backoff, backoffMin), backoffMax)
				c.o.Logger.Warn("cannot watch gpu-quota's verdicts; forms ask gpu-quota per user meanwhile", "url", c.watchEndpoint,
					"err", err, "retryIn", backoff)
			}
			if backoff > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(backoff/2 + rand.N(backoff/2)):
				}
			}
		}
	})
	return w
}

// install puts w's table t in use, unless a later watcher took over from w; it stops w's predecessor.
func (c *Client) install(w *watcher, t *table) bool {
	c.installMu.Lock()
	defer c.installMu.Unlock()
	if w.ctx.Err() != nil {
		return false
	}
	c.table.Store(t)
	w.served = true
	if w.prev != nil {
		w.prev.cancel()
		w.prev = nil
	}
	return true
}

// stream reads one watch until it ends; synced says it was complete at some point (then install was asked to
// put it in use).
func (c *Client) stream(ctx context.Context, body []byte, opts []contract.AssessOption, install func(*table) bool) (synced bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.watchEndpoint, bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/x-ndjson")
	req.Header.Set("Authorization", "token "+c.o.Token)
	resp, err := c.watchHTTP.Do(req)
	if err != nil {
		return false, err // a *url.Error: method, URL and cause; never the headers
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		a := &contract.Answer{Status: resp.StatusCode, Header: resp.Header, Body: data}
		return false, a.Err(http.MethodPost, c.watchEndpoint)
	}
	t := newTable(opts)
	t.last.Store(c.o.Now().UnixNano())
	// A stream that goes silent (a peer gone without a word) is given up: its table stops answering at Stale.
	go func() {
		tick := time.NewTicker(min(c.o.Stale/4, time.Second))
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if c.o.Now().Sub(time.Unix(0, t.last.Load())) >= c.o.Stale {
					cancel()
					return
				}
			}
		}
	}()
	defer t.ended.Store(true)
	shared := map[string]*entry{} // entries by key, for users with the same line
	var kb strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	for sc.Scan() {
		var l contract.VerdictLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return synced, fmt.Errorf("a line of the watch: %w", err)
		}
		t.last.Store(c.o.Now().UnixNano())
		switch l.Kind {
		case contract.WatchUser:
			key := entryKey(&kb, l)
			e := shared[key]
			if e == nil {
				e = &entry{key: key, groups: l.Groups, verdicts: make(map[string]contract.Verdict, len(l.Options))}
				for _, v := range l.Options {
					e.verdicts[v.ID] = v
				}
				shared[key] = e
			}
			t.mu.Lock()
			t.users[l.User] = e
			if len(shared) > 2*len(t.users)+1024 { // entries no user holds any more (verdicts that moved on)
				shared = make(map[string]*entry, len(shared)/2)
				for _, e := range t.users {
					shared[e.key] = e
				}
			}
			t.mu.Unlock()
			c.remember(l.OnUnavailable)
		case contract.WatchLeft:
			t.mu.Lock()
			delete(t.users, l.User)
			t.mu.Unlock()
		case contract.WatchSynced:
			if !synced {
				synced = true
				t.synced.Store(true)
				if !install(t) {
					return synced, errors.New("superseded by a watch of other choices")
				}
				t.mu.RLock()
				n := len(t.users)
				t.mu.RUnlock()
				c.o.Logger.Info("watching gpu-quota's verdicts: forms are answered from memory", "users", n, "options", len(opts))
			}
		}
	}
	if c.o.Now().Sub(time.Unix(0, t.last.Load())) >= c.o.Stale {
		return synced, fmt.Errorf("no line for %s: the watch is given up", c.o.Stale)
	}
	if err := sc.Err(); err != nil {
		return synced, err
	}
	return synced, errors.New("the stream ended")
}
