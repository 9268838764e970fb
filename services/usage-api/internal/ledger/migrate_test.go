package ledger

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
)

// Replicas that start together open the same ledger at once (two usage-api pods of a rollout, or the test
// that counts a writer's ticks beside it): every one of them migrates the schema, so the migration must be
// one step that the second opener finds done, never "column exists" or "table exists".
func TestOpenConcurrently(t *testing.T) {
	for _, tc := range []struct {
		name  string
		older bool // the database holds the schema of the first release (no left_since_ns)
	}{
		{name: "empty database"},
		{name: "first release's schema", older: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dsn := filepath.Join(t.TempDir(), "ledger.db")
			if url := testPostgresURL(); url != "" {
				dsn = testPostgresSchema(t, url)
			}
			if tc.older {
				s, err := Open(ctx, dsn)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := s.db.ExecContext(ctx, `ALTER TABLE ledger_checkpoint DROP COLUMN left_since_ns`); err != nil {
					t.Fatal(err)
				}
				_ = s.Close()
			}
			const openers = 8
			var wg sync.WaitGroup
			errs := make(chan error, openers)
			for range openers {
				wg.Go(func() {
					s, err := Open(ctx, dsn)
					if err != nil {
						errs <- err
						return
					}
					_, _, err = s.Checkpoint(ctx)
					_ = s.Close()
					errs <- err
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Errorf("open beside %d others: %v", openers-1, err)
				}
			}
		})
	}
}
