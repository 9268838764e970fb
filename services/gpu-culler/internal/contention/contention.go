// Package contention tells gpu-culler which GPU classes someone is waiting for: it polls gpu-quota's waitlist
// (`GET api/v1/waitlist/contended`, contract W3) and answers from memory. Whatever it cannot vouch for counts as
// nothing contended: no answer yet, an error or a non-200 answer, an answer older than three polls. The culler
// then applies the normal idle period, so missing data never stops a server sooner.
package contention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuhub/gpuhub/services/internal/contract"
)

// DefaultEvery is the poll period when Options.Every is not set.
const DefaultEvery = 10 * time.Second

// StalePolls is how many poll periods an answer counts for: an older one says nothing is contended.
const StalePolls = 3

// Path is the waitlist's endpoint under gpu-quota's prefix.
const Path = "api/v1/waitlist/contended"

// Options configure a Poller.
type Options struct {
	// URL is gpu-quota's base URL with its prefix (http://gpu-quota:8000/services/gpu-quota/).
	URL string
	// Token is the culler's own Hub token, sent as "Authorization: token ...".
	Token  string
	Client *http.Client
	// Every is the poll period (DefaultEvery when 0).
	Every time.Duration
	// Registerer gets the metrics; nil: not registered.
	Registerer prometheus.Registerer
	Logger     *slog.Logger
	Now        func() time.Time
}

// Poller polls the waitlist and answers from memory.
type Poller struct {
	o        Options
	failures prometheus.Counter

	mu      sync.RWMutex
	waiting map[string]int // by class, only classes with someone waiting
	at      time.Time      // when the last good answer came, by our clock (gpu-quota's asOf may be skewed)
	lastErr error
}

// New returns a Poller; Run polls. Its metrics are gpuhub_culler_contention_errors_total and
// gpuhub_culler_contended_classes.
func New(o Options) (*Poller, error) {
	if o.Every <= 0 {
		o.Every = DefaultEvery
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if !strings.HasSuffix(o.URL, "/") {
		o.URL += "/"
	}
	p := &Poller{o: o,
		failures: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "gpuhub", Subsystem: "culler", Name: "contention_errors_total",
			Help: "Polls of gpu-quota's waitlist that failed (unreachable, not 200, not understood); until one succeeds nothing counts as contended."}),
	}
	classes := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "gpuhub", Subsystem: "culler", Name: "contended_classes",
		Help: "GPU classes someone waits for, as the culler last heard from gpu-quota's waitlist (0 when it has no answer younger than 3 polls)."},
		func() float64 { return float64(len(p.Classes())) })
	if o.Registerer != nil {
		for _, c := range []prometheus.Collector{p.failures, classes} {
			if err := o.Registerer.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return p, nil
}

// Run polls every Every until ctx ends. A failure is logged when polls start failing and when they answer
// again, not at every poll; a change of the contended classes is logged too.
func (p *Poller) Run(ctx context.Context) {
	t := time.NewTicker(p.o.Every)
	defer t.Stop()
	failing := false
	var last []string
	for {
		err := p.Poll(ctx)
		if ctx.Err() != nil {
			return
		}
		switch {
		case err != nil && !failing:
			p.o.Logger.Warn("cannot read gpu-quota's waitlist; no GPU class counts as contended (the normal idle periods apply) until it answers",
				"url", p.o.URL+Path, "err", err)
			failing = true
		case err == nil && failing:
			p.o.Logger.Info("gpu-quota's waitlist answers again")
			failing = false
		}
		if now := p.Classes(); !slices.Equal(now, last) {
			p.o.Logger.Info("GPU classes someone waits for changed; idleWhenContended applies to their servers", "classes", now)
			last = now
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Poll asks the waitlist once. On an error nothing counts as contended until an answer comes; a poll cut short
// by ctx (the culler stopping) says nothing about gpu-quota and changes nothing.
func (p *Poller) Poll(ctx context.Context) error {
	a, err := p.fetch(ctx)
	if err != nil && ctx.Err() != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		p.failures.Inc()
		p.lastErr, p.waiting = err, nil
		return err
	}
	waiting := map[string]int{}
	for _, c := range a.Classes {
		if c.Class != "" && c.Waiting > 0 {
			waiting[c.Class] += c.Waiting
		}
	}
	p.lastErr, p.waiting, p.at = nil, waiting, p.o.Now()
	return nil
}

func (p *Poller) fetch(ctx context.Context) (*contract.Contended, error) {
	ctx, cancel := context.WithTimeout(ctx, max(p.o.Every, time.Second))
	defer cancel()
	var a contract.Contended
	err := contract.Caller{Token: p.o.Token, HTTP: p.o.Client, Limit: 1 << 20}.JSON(ctx, http.MethodGet, p.o.URL+Path, nil, &a)
	switch {
	case contract.IsStatus(err, http.StatusForbidden, http.StatusUnauthorized):
		return nil, fmt.Errorf("waitlist: %w: let the Hub service gpu-culler read gpu-quota's waitlist", err)
	case contract.IsStatus(err, http.StatusNotFound):
		return nil, fmt.Errorf("waitlist: %w: this gpu-quota has no waitlist; check --quota-url (gpu-quota's URL with its prefix) or leave it empty", err)
	case err != nil:
		return nil, fmt.Errorf("waitlist: %w", err)
	}
	return &a, nil
}

// Contended reports whether someone waits for class, by the last answer younger than StalePolls polls.
func (p *Poller) Contended(class string) bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.fresh() && p.waiting[class] > 0
}

// Classes lists the contended classes, sorted; none when the last answer is missing or stale.
func (p *Poller) Classes() []string {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if !p.fresh() {
		return nil
	}
	return slices.Sorted(maps.Keys(p.waiting))
}

// fresh: the last poll succeeded within StalePolls periods. Called with mu held.
func (p *Poller) fresh() bool {
	return p.lastErr == nil && !p.at.IsZero() && p.o.Now().Sub(p.at) <= StalePolls*p.o.Every
}

// Err says why nothing counts as contended, for /readyz: the last poll's error, or that its answer is stale;
// nil while the answer is good.
func (p *Poller) Err() error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	switch {
	case p.lastErr != nil:
		return p.lastErr
	case p.at.IsZero():
		return errors.New("waitlist: not read yet")
	case !p.fresh():
		return fmt.Errorf("waitlist: the last answer came at %s, more than %d polls ago; nothing counts as contended",
			p.at.UTC().Format(time.RFC3339), StalePolls)
	}
	return nil
}
