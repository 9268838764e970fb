package app

import (
	"context"
	"fmt"

	"github.com/gpuhub/gpuhub/services/internal/kube"
	"github.com/gpuhub/gpuhub/services/internal/leader"
)

// LeaseOptions name the ledger writer's Lease (coordination.k8s.io) and this replica in it.
type LeaseOptions struct {
	Namespace, Name string
	// Identity is this replica (its pod name).
	Identity string
	// OwnerDeployment is the usage API's Deployment in Namespace: the Lease it creates is owned by it, so that
	// helm uninstall deletes it; "": no owner.
	OwnerDeployment string
}

// newLedgerElector campaigns for the ledger writer's Lease. Losing it (the API server unreachable past the renew
// deadline) makes this replica a follower at its next tick: what it sees is remembered, not lost, and charged
// by whichever replica writes next.
func newLedgerElector(o Options) (*leader.Elector, error) {
	l := o.LedgerLease
	el, err := leader.New(leader.Options{Client: o.Kube, Namespace: l.Namespace, Name: l.Name, Identity: l.Identity,
		Logger: o.Logger, Registerer: o.Registry, Subsystem: "usage_ledger", OnStartedLeading: func(ctx context.Context) {
			o.Logger.Info("this replica writes the ledger now", "lease", l.Namespace+"/"+l.Name)
			<-ctx.Done()
		},
		OnStoppedLeading: func() { o.Logger.Info("this replica follows the ledger (another writes it)") },
		Owner: kube.NewOwner(kube.OwnerOptions{Client: o.Kube, Namespace: l.Namespace, Deployment: l.OwnerDeployment,
			Logger: o.Logger}).Ref})
	if err != nil {
		return nil, fmt.Errorf("ledger writer election: %w", err)
	}
	return el, nil
}
