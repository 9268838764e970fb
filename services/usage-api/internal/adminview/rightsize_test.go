package adminview

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuhub/gpuhub/services/internal/gpu"
	"github.com/gpuhub/gpuhub/services/internal/rightsize"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/ledger"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/profile"
)

const a100 = "A100-SXM4-40GB"

// testOffers are what the test cluster's nodes offer for right-sizing: an A100's MIG 1g.5gb and 3g.20gb.
var testOffers = []rightsize.Offer{
	{Kind: gpu.KindMIG, Class: "mig " + a100 + " 1g.5gb", Product: a100, Description: "MIG 1g.5gb on an A100, 1/7 of a GPU", MemoryBytes: 4864 << 20, ComputeGPUs: 1.0 / 7},
	{Kind: gpu.KindMIG, Class: aliceMIG.Class, Product: a100, Description: "MIG 3g.20gb on an A100, 3/7 of a GPU", MemoryBytes: 19968 << 20, ComputeGPUs: 3.0 / 7},
}

// fakeProfiles are the ledger's profile days: alice's 3g.20gb slice, small use for two days (advised 1g.5gb);
// bob's busy one today (keep); carol's too short to tell.
type fakeProfiles struct {
	days []ledger.ProfileDay
	err  error
}

// ScanProfiles gives the days in the ledger's order (user, server, class, day), as profile.Read expects.
func (f *fakeProfiles) ScanProfiles(_ context.Context, from time.Time, user string, fn func(*ledger.ProfileDay) error) error {
	if f.err != nil {
		return f.err
	}
	days := slices.Clone(f.days)
	slices.SortStableFunc(days, func(a, b ledger.ProfileDay) int {
		if c := strings.Compare(a.User+"\x00"+a.Server+"\x00"+a.Class, b.User+"\x00"+b.Server+"\x00"+b.Class); c != 0 {
			return c
		}
		return a.Day.Compare(b.Day)
	})
	for i := range days {
		if !days[i].Day.Before(ledger.DayOf(from)) && (user == "" || days[i].User == user) {
			if err := fn(&days[i]); err != nil {
				return err
			}
		}
	}
	return nil
}

// Profiles merges them as the usage API's profile.Reader does, without its cache.
func (f *fakeProfiles) Profiles(ctx context.Context, from, _ time.Time, user string) ([]rightsize.Profile, error) {
	return profile.Read(ctx, f, from, user)
}

func testProfiles() *fakeProfiles {
	hist := func(bin, n int) []uint32 {
		h := make([]uint32, ledger.SMBins)
		h[bin] = uint32(n)
		return h
	}
	day := ledger.DayOf(now)
	mig := func(user, server string, d time.Time, heldS, busyS float64, samples int64, peak uint64, memBin, smBin int) ledger.ProfileDay {
		return ledger.ProfileDay{User: user, Server: server, Class: aliceMIG.Class, Day: d, Kind: "mig", Product: a100,
			MemoryTotalBytes: 19968 << 20, HeldGPUs: 3.0 / 7, Scale: 3.0 / 7, First: d.Add(time.Minute), Last: d.Add(time.Duration(heldS) * time.Second),
			HeldS: heldS, BusyS: busyS, BusySamples: samples, PeakMemoryBytes: peak, MemoryHist: hist(memBin, int(samples)), SMHist: hist(smBin, int(samples))}
	}
	return &fakeProfiles{days: []ledger.ProfileDay{
		mig("alice", "", day.AddDate(0, 0, -10), 36000, 7200, 1440, 3<<30, 15, 19), // only in 30d
		mig("alice", "", day.AddDate(0, 0, -1), 36000, 7200, 1440, 3<<30, 15, 19),
		mig("alice", "", day, 36000, 7200, 1440, 3<<30, 15, 19),
		mig("bob", "train", day, 7200, 7000, 1400, 12<<30, 60, 90),
		mig("carol", "", day, 3600, 600, 120, 1<<30, 5, 50),
	}}
}

var pageRow = regexp.MustCompile(`<tr data-key="([^"]*)"><th scope="row">.*?</th><td class="num">([^<]*)</td><td class="num">([^<]*)</td><td class="num">([^<]*)</td><td class="num">([^<]*)</td></tr>`)

// TestRightSizePageAgreesWithAPI: the page's rows and its CSV are those of profile.Report, which GET
// api/v1/right-size answers with (internal/api TestRightSizeSavingsCSVMatchesJSON checks its JSON and CSV agree).
func TestRightSizePageAgreesWithAPI(t *testing.T) {
	for _, period := range []string{"24h", "7d", "30d"} {
		for _, by := range profile.Groupings {
			t.Run(period+"-"+by, func(t *testing.T) {
				fx := newFixture(t)
				want, err := profile.Report(t.Context(), fx.profiles, fx.state.View(), period, by, now)
				if err != nil {
					t.Fatal(err)
				}
				if len(want.Rows) == 0 {
					t.Fatal("no rows: the test says nothing")
				}
				var wantRows [][]string
				for _, r := range want.Rows {
					wantRows = append(wantRows, []string{r.Key, fmt.Sprintf("%.2f", r.SaveableGPUHours), fmt.Sprintf("%.2f", r.HeldGPUHours),
						strconv.Itoa(r.Servers), strconv.Itoa(r.Smaller)})
				}
				q := "?period=" + period + "&by=" + by
				rec := serve(fx.h, root, http.MethodGet, prefix+"right-size"+q)
				if rec.Code != http.StatusOK {
					t.Fatalf("page: %d %s", rec.Code, rec.Body)
				}
				var gotRows [][]string
				for _, m := range pageRow.FindAllStringSubmatch(rec.Body.String(), -1) {
					gotRows = append(gotRows, m[1:])
				}
				if diff := cmp.Diff(wantRows, gotRows); diff != "" {
					t.Errorf("page rows against the API's (-api +page):\n%s", diff)
				}
				if !strings.Contains(rec.Body.String(), `href="`+prefix+`right-size?by=`+by+`&amp;format=csv&amp;period=`+period+`"`) {
					t.Error("the page links no CSV of the same period and grouping")
				}
				var wantCSV strings.Builder
				if err := profile.WriteCSV(&wantCSV, want); err != nil {
					t.Fatal(err)
				}
				rec = serve(fx.h, root, http.MethodGet, prefix+"right-size"+q+"&format=csv")
				if ct := rec.Header().Get("Content-Type"); ct != "text/csv; charset=utf-8" {
					t.Errorf("CSV Content-Type %q", ct)
				}
				if diff := cmp.Diff(wantCSV.String(), rec.Body.String()); diff != "" {
					t.Errorf("CSV against the API's (-api +page):\n%s", diff)
				}
			})
		}
	}
}

func TestRightSizePageRefuses(t *testing.T) {
	fx := newFixture(t)
	for target, want := range map[string]int{
		"right-size?period=1y":             http.StatusBadRequest,
		"right-size?by=class":              http.StatusBadRequest,
		"right-size?format=xml":            http.StatusBadRequest,
		"right-size?format=csv&by=kind":    http.StatusOK,
		"right-size?period=24h&by=group":   http.StatusOK,
		"right-size?period=30d&by=user&x=": http.StatusOK,
	} {
		if rec := serve(fx.h, root, http.MethodGet, prefix+target); rec.Code != want {
			t.Errorf("%s: %d, want %d", target, rec.Code, want)
		}
	}
	if rec := serve(fx.h, alice, http.MethodGet, prefix+"right-size"); rec.Code != http.StatusForbidden {
		t.Errorf("alice: %d, want 403", rec.Code)
	}
	fx.profiles.err = context.DeadlineExceeded
	if rec := serve(fx.h, root, http.MethodGet, prefix+"right-size?format=csv"); rec.Code != http.StatusServiceUnavailable {
		t.Errorf("CSV with the ledger down: %d, want 503", rec.Code)
	}
}
