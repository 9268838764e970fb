package status

import (
	"context"
	"fmt"

	"github.com/gpuhub/gpuhub/services/gpuhub/internal/usageapi"
	"github.com/gpuhub/gpuhub/services/internal/contract"
)

// usageClient asks the usage API for the GPUs at a glance.
type usageClient struct {
	usageapi.Client
}

func (c *usageClient) cluster(ctx context.Context) (contract.Cluster, error) {
	var out contract.Cluster
	err := c.Get(ctx, "api/v1/cluster", nil, &out)
	if err == nil && out.Classes == nil {
		err = fmt.Errorf("the answer of %sapi/v1/cluster has no GPU classes: check --usage-url, %s", c.Base, usageapi.URLHint)
	}
	return out, err
}

func (c *usageClient) servers(ctx context.Context) (contract.ServersResponse, error) {
	var out contract.ServersResponse
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
