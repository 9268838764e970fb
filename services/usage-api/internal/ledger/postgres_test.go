package ledger

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// GPUHUB_TEST_POSTGRES_URL runs the store tests against PostgreSQL instead of SQLite (make test-usage-postgres
// starts a throw-away server and sets it).
func testPostgresURL() string { return os.Getenv("GPUHUB_TEST_POSTGRES_URL") }

// testPostgresSchema creates a schema of its own for a test, so tests do not see each other's rows, and returns
// the URL that selects it.
func testPostgresSchema(t *testing.T, url string) string {
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
	if strings.Contains(url, "?") {
		sep = "&"
	}
	return url + sep + "search_path=" + schemaName
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
