package status

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// The usage API's answers, as services/usage-api/openapi.yaml writes them (only the fields status reads).

type cluster struct {
	SampledAt   time.Time     `json:"sampledAt"`
	Simulated   bool          `json:"simulated"`
	Agents      int           `json:"agents"`
	StaleAgents int           `json:"staleAgents"`
	Classes     []classStats  `json:"classes"`
	AgentStatus []agentStatus `json:"agentStatus"`
}

type classStats struct {
	Class           string  `json:"class"`
	CapacityUnits   int     `json:"capacityUnits"`
	AllocatedUnits  int     `json:"allocatedUnits"`
	CapacityGPUs    float64 `json:"capacityGPUs"`
	AllocatedGPUs   float64 `json:"allocatedGPUs"`
	UsedGPUs        float64 `json:"usedGPUs"`
	UsedUnknownGPUs float64 `json:"usedUnknownGPUs"`
}

type agentStatus struct {
	Node        string `json:"node"`
	Stale       bool   `json:"stale"`
	StaleReason string `json:"staleReason"`
}

type serverList struct {
	SampledAt time.Time `json:"sampledAt"`
	Servers   []server  `json:"servers"`
}

type server struct {
	User                     string   `json:"user"`
	Server                   string   `json:"server"`
	Node                     string   `json:"node"`
	Class                    string   `json:"class"`
	AllocatedGPUs            float64  `json:"allocatedGPUs"`
	SMUtilPercent            *float64 `json:"smUtilPercent"`
	UtilizationUnknownReason string   `json:"utilizationUnknownReason"`
	MemoryUsedBytes          int64    `json:"memoryUsedBytes"`
	Stale                    bool     `json:"stale"`
	StaleReason              string   `json:"staleReason"`
	Simulated                bool     `json:"simulated"`
}

// usageURLHint is how the errors describe a right --usage-url.
const usageURLHint = "the usage API's URL with its prefix, e.g. https://hub.example.org/services/gpu-usage/"

// usageClient asks the usage API with one token and turns its answers into errors that say what to do.
type usageClient struct {
	http      *http.Client
	base      string // with its trailing slash
	token     string
	tokenFrom string // where the token came from, for the errors
}

func (c *usageClient) cluster(ctx context.Context) (cluster, error) {
	var out cluster
	err := c.get(ctx, "api/v1/cluster", &out)
	if err == nil && out.Classes == nil {
		err = fmt.Errorf("the answer of %sapi/v1/cluster has no GPU classes: check --usage-url, %s", c.base, usageURLHint)
	}
	return out, err
}

func (c *usageClient) servers(ctx context.Context) (serverList, error) {
	var out serverList
	err := c.get(ctx, "api/v1/servers", &out)
	if err == nil && out.Servers == nil {
		err = fmt.Errorf("the answer of %sapi/v1/servers has no servers: check --usage-url, %s", c.base, usageURLHint)
	}
	return out, err
}

func (c *usageClient) get(ctx context.Context, path string, into any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return fmt.Errorf("--usage-url %q: %w; give %s", c.base, err, usageURLHint)
	}
	req.Header.Set("Authorization", "token "+c.token)
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("the usage API at %s does not answer (%w): check --usage-url, %s", c.base, err, usageURLHint)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("reading the usage API's answer: %w", err)
	}
	var e struct {
		Message string `json:"message"`
	}
	if resp.StatusCode != http.StatusOK {
		_ = json.Unmarshal(body, &e)
	}
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusUnauthorized:
		return fmt.Errorf("the Hub does not know the token in %s: make a new one on the Hub's token page (or check that --usage-url is this Hub's)", c.tokenFrom)
	case http.StatusForbidden:
		return fmt.Errorf("the usage API refuses the token in %s (%s): who holds which GPU is for Hub admins: use an admin's token",
			c.tokenFrom, firstNonEmpty(e.Message, "403 Forbidden"))
	case http.StatusNotFound:
		return fmt.Errorf("no usage API at %s (404 for %s): check --usage-url, %s", c.base, path, usageURLHint)
	case http.StatusServiceUnavailable:
		return fmt.Errorf("the usage API cannot answer just now (%s): try again in a minute", firstNonEmpty(e.Message, "503"))
	default:
		return fmt.Errorf("the usage API answered %s for %s: %s", resp.Status, path, firstNonEmpty(e.Message, strings.TrimSpace(string(body))))
	}
	if err := json.Unmarshal(body, into); err != nil {
		return fmt.Errorf("the answer of %s%s is not the usage API's (%w): check --usage-url, %s", c.base, path, err, usageURLHint)
	}
	return nil
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}
