// Package usagekit is the usage API's one door for the tools and the end-to-end suites, which Go's internal rule
// keeps out of services/usage-api/internal: the ledger's store and its right-size profile days (issue 38), so
// that a suite can put recorded history into a ledger database before the usage API opens it (e2e/profilese2e:
// advice needs an hour of busy time, which a fresh local cluster has not had). It has no logic of its own:
// aliases and one-line wrappers.
package usagekit

import (
	"context"

	"github.com/gpuhub/gpuhub/services/usage-api/internal/ledger"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/profile"
)

// The ledger's store and one server's day of measured GPU use (internal/ledger).
type (
	Store      = ledger.Store
	ProfileDay = ledger.ProfileDay
)

// Histogram sizes of a ProfileDay, and how long the usage API keeps profile days.
const (
	MemoryBins = ledger.MemoryBins
	SMBins     = ledger.SMBins
	Retention  = profile.Retention
)

// OpenLedger is ledger.Open: a SQLite file path or a postgres:// URL, its tables created as the usage API creates
// them. Write days with (*Store).PutProfiles.
func OpenLedger(ctx context.Context, dsn string) (*Store, error) { return ledger.Open(ctx, dsn) }
