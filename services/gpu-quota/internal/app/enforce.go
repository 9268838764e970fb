package app

import (
	"context"
	"sync"
	"time"

	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/admit"
	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/enforce"
	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/quota"
)

// Enforce is the WhileLeader hook that runs the enforcement loop (notices, then stops through the Hub) while
// this replica holds the Lease. The loop is built once, on the first leadership, so its metrics are
// registered once however often leadership comes back.
func Enforce(stopper enforce.Stopper) func(context.Context, Leading) {
	var (
		once sync.Once
		enf  *enforce.Enforcer
		err  error
	)
	return func(ctx context.Context, l Leading) {
		once.Do(func() {
			enf, err = enforce.New(enforce.Options{
				Source: views{l.Engine}, Nodes: l.Inventory, Stopper: stopper, Client: l.Kube, Decisions: l.Decisions,
				Grace: func() time.Duration {
					if p := l.Policy.Current(); p != nil {
						return p.GracePeriod()
					}
					return quota.DefaultGrace
				},
				Interval: l.Interval, Now: l.Now, Logger: l.Logger, Registerer: l.Registry, Behind: l.Admissions,
			})
		})
		if err != nil {
			l.Logger.Error("enforcement loop not started", "err", err)
			return
		}
		l.Logger.Info("leading: enforcing the policy on running servers", "interval", l.Interval)
		enf.Run(ctx)
	}
}

// views adapts the engine's user views to the enforcement loop's (the same fields).
type views struct{ e *admit.Engine }

func (v views) Views() ([]enforce.View, error) {
	uvs, err := v.e.Views()
	if err != nil {
		return nil, err
	}
	out := make([]enforce.View, len(uvs))
	for i, uv := range uvs {
		out[i] = enforce.View(uv)
	}
	return out, nil
}
