package waitlist

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/gpuhub/gpuhub/services/internal/contract"
)

// ErrConflict is a save refused because the stored state changed since it was read (another replica wrote).
var ErrConflict = errors.New("the stored waitlist changed since it was read")

// UsageStore keeps the State in the usage API (GET/PUT api/v1/waitlist/state, compare-and-swap on a version),
// which writes it to the ledger's database: the queue survives a restart of gpu-quota.
type UsageStore struct {
	// URL is the usage API's base URL with its prefix (http://gpuhub-usage:8000/services/gpu-usage/).
	URL string
	// Token is gpu-quota's Hub API token (the usage API lets only its --waitlist-services write); never logged.
	Token  string
	Client *http.Client
}

func (s *UsageStore) endpoint() string {
	return strings.TrimSuffix(s.URL, "/") + "/api/v1/waitlist/state"
}

// Load reads the stored state and its version (0 and an empty state when none was saved yet).
func (s *UsageStore) Load(ctx context.Context) (State, int64, error) {
	var out contract.WaitlistStateResponse
	if err := s.do(ctx, http.MethodGet, nil, nil, &out); err != nil {
		return State{}, 0, fmt.Errorf("read the waitlist from the usage API: %w", err)
	}
	var st State
	if len(out.State) > 0 && string(out.State) != "null" {
		if err := json.Unmarshal(out.State, &st); err != nil {
			return State{}, 0, fmt.Errorf("read the waitlist from the usage API: the stored state is not a waitlist: %w", err)
		}
	}
	return st, out.Version, nil
}

// Save writes st if the stored version is still version, and returns the new version; ErrConflict otherwise.
func (s *UsageStore) Save(ctx context.Context, st State, version int64) (int64, error) {
	raw, err := json.Marshal(st)
	if err != nil {
		return 0, err
	}
	var out contract.WaitlistWriteResponse
	ifMatch := http.Header{"If-Match": {strconv.Quote(strconv.FormatInt(version, 10))}}
	if err := s.do(ctx, http.MethodPut, contract.WaitlistWrite{State: raw}, ifMatch, &out); err != nil {
		return 0, fmt.Errorf("save the waitlist in the usage API: %w", err)
	}
	return out.Version, nil
}

// do bounds a call that its caller left without a deadline: the loop that loads and the per-tick save.
func (s *UsageStore) do(ctx context.Context, method string, in any, header http.Header, out any) error {
	ctx, cancel := context.WithTimeout(ctx, contract.DefaultTimeout)
	defer cancel()
	a, err := contract.Caller{Token: s.Token, HTTP: s.Client, Limit: 4 << 20}.Do(ctx, method, s.endpoint(), in, header)
	if err != nil {
		return err
	}
	if a.Status == http.StatusPreconditionFailed {
		return ErrConflict
	}
	if err := a.Err(method, s.endpoint()); err != nil {
		return err
	}
	return a.Decode(out)
}
