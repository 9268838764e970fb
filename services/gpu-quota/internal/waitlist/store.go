package waitlist

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
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

type storedState struct {
	Version int64  `json:"version"`
	State   *State `json:"state"`
}

func (s *UsageStore) endpoint() string {
	return strings.TrimSuffix(s.URL, "/") + "/api/v1/waitlist/state"
}

// Load reads the stored state and its version (0 and an empty state when none was saved yet).
func (s *UsageStore) Load(ctx context.Context) (State, int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.endpoint(), nil)
	if err != nil {
		return State{}, 0, err
	}
	var out storedState
	if err := s.do(req, &out); err != nil {
		return State{}, 0, fmt.Errorf("read the waitlist from the usage API: %w", err)
	}
	if out.State == nil {
		return State{}, out.Version, nil
	}
	return *out.State, out.Version, nil
}

// Save writes st if the stored version is still version, and returns the new version; ErrConflict otherwise.
func (s *UsageStore) Save(ctx context.Context, st State, version int64) (int64, error) {
	body, err := json.Marshal(map[string]State{"state": st})
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, s.endpoint(), bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("If-Match", strconv.Quote(strconv.FormatInt(version, 10)))
	var out storedState
	if err := s.do(req, &out); err != nil {
		return 0, fmt.Errorf("save the waitlist in the usage API: %w", err)
	}
	return out.Version, nil
}

func (s *UsageStore) do(req *http.Request, out any) error {
	req.Header.Set("Authorization", "token "+s.Token)
	c := s.Client
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	switch {
	case resp.StatusCode == http.StatusPreconditionFailed:
		return ErrConflict
	case resp.StatusCode != http.StatusOK:
		var e struct {
			Message string `json:"message"`
		}
		_ = json.Unmarshal(b, &e)
		return fmt.Errorf("%s: %s", resp.Status, e.Message)
	}
	return json.Unmarshal(b, out)
}
