package bench

import (
	"net/http/httptest"
	"testing"

	"github.com/gpuhub/gpuhub/services/gpu-profiles/internal/adviceclient"
	"github.com/gpuhub/gpuhub/services/internal/contract"
)

// TestAdviceReadByTheClient: the benchmark's fake usage API answers what gpu-profiles' advice client reads, so the
// row with gpu-quota renders with the mark's cost.
func TestAdviceReadByTheClient(t *testing.T) {
	srv := httptest.NewServer(Advice())
	t.Cleanup(srv.Close)
	c, err := adviceclient.New(t.Context(), adviceclient.Options{URL: srv.URL + UsagePrefix})
	if err != nil {
		t.Fatal(err)
	}
	c.Advice("u00042")
	c.Wait()
	got, ok := c.Advice("u00042")
	if !ok || len(got) != 1 || got[0].Verdict != contract.VerdictSmaller || got[0].User != "u00042" || len(got[0].Candidates) != 1 {
		t.Fatalf("advice %+v, ok %v", got, ok)
	}
}
