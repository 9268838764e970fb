package bench

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/usagecache"
	"github.com/gpuhub/gpuhub/services/internal/benchkit"
)

// TestUsageHandler: gpu-quota's usage cache reads SynthHours from the kept answers, twice in a row, with a
// fresh asOf each time.
func TestUsageHandler(t *testing.T) {
	srv := httptest.NewServer(UsageHandler(3))
	defer srv.Close()
	windows := []time.Duration{24 * time.Hour, 7 * 24 * time.Hour}
	c, err := usagecache.New(usagecache.Options{URL: srv.URL + "/services/gpu-usage/", Windows: func() []time.Duration { return windows }})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		c.Refresh(context.Background())
		user := benchkit.UserName(2)
		got := c.GPUHours(user, windows, nil, time.Now())
		if diff := cmp.Diff(SynthHours(user), got); diff != "" {
			t.Errorf("GPU-hours of %s (-want +got):\n%s", user, diff)
		}
	}
}
