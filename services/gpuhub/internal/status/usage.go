package status

import (
	"context"
	"fmt"
	"time"

	"github.com/gpuhub/gpuhub/services/gpuhub/internal/usageapi"
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

// usageClient asks the usage API for the GPUs at a glance.
type usageClient struct {
	usageapi.Client
}

func (c *usageClient) cluster(ctx context.Context) (cluster, error) {
	var out cluster
	err := c.Get(ctx, "api/v1/cluster", nil, &out)
	if err == nil && out.Classes == nil {
		err = fmt.Errorf("the answer of %sapi/v1/cluster has no GPU classes: check --usage-url, %s", c.Base, usageapi.URLHint)
	}
	return out, err
}

func (c *usageClient) servers(ctx context.Context) (serverList, error) {
	var out serverList
	err := c.Get(ctx, "api/v1/servers", nil, &out)
	if err == nil && out.Servers == nil {
		err = fmt.Errorf("the answer of %sapi/v1/servers has no servers: check --usage-url, %s", c.Base, usageapi.URLHint)
	}
	return out, err
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}
