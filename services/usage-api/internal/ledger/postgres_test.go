package ledger

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"
)

// GPUHUB_TEST_POSTGRES_URL runs the store tests against PostgreSQL instead of SQLite (make test-usage-postgres
// starts a throw-away server and sets it).
func testPostgresURL() string { return os.Getenv("GPUHUB_TEST_POSTGRES_URL") }

// openTestPostgres gives each test its own schema so tests do not see each other's rows.
func openTestPostgres(t *testing.T, url string) *Store {
	t.Helper()
	ctx := context.Background()
	schemaName := fmt.Sprintf("t%d", time.Now().UnixNano())
	admin, err := OpenPostgres(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.db.ExecContext(ctx, "CREATE SCHEMA "+schemaName); err != nil {
		t.Fatal(err)
	}
	_ = admin.Close()
	sep := "?"
	for _, c := range url {
		if c == '?' {
			sep = "&"
		}
	}
	s, err := OpenPostgres(ctx, url+sep+"search_path="+schemaName)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestPostgresSelected(t *testing.T) {
	url := testPostgresURL()
	if url == "" {
		t.Skip("GPUHUB_TEST_POSTGRES_URL not set: PostgreSQL store tests run with `make test-usage-postgres`")
	}
	s := openTestStore(t)
	if !s.postgres {
		t.Fatal("GPUHUB_TEST_POSTGRES_URL set but the store is not PostgreSQL")
	}
	if err := s.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
}
