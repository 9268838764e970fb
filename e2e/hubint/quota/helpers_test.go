//go:build integration

package quota_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/gpuhub/gpuhub/e2e/hubint/hubtest"
)

// profiles of e2e/hub/values.yaml as KubeSpawner turns them into pods: what the glue sends gpu-quota.
var profiles = map[string]admitRequestGPU{
	"h100":      {Resources: map[string]int64{"nvidia.com/gpu": 1}, NodeSelector: map[string]string{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
	"t4-shared": {Resources: map[string]int64{"nvidia.com/gpu.shared": 1}, NodeSelector: map[string]string{"nvidia.com/gpu.product": "Tesla-T4-SHARED"}},
}

type admitRequestGPU struct {
	Resources    map[string]int64
	NodeSelector map[string]string
}

// admitAnswer is what gpu-quota answers at api/v1/admit (the part the tests read).
type admitAnswer struct {
	Allow         bool   `json:"allow"`
	Reason        string `json:"reason"`
	Message       string `json:"message"`
	DecisionID    string `json:"decisionId"`
	OnUnavailable string `json:"onUnavailable"`
}

// askQuota asks gpu-quota directly what the glue asks it for user's default server with profile: the answer
// the Hub must pass on word for word.
func (h *hubUnderTest) askQuota(t *testing.T, user string, groups []string, profile string) admitAnswer {
	t.Helper()
	p := profiles[profile]
	body, _ := json.Marshal(map[string]any{
		"user": user, "server": "", "groups": groups, "resources": p.Resources, "nodeSelector": p.NodeSelector, "profile": profile,
	})
	req, err := http.NewRequestWithContext(hubtest.CtxT(t, 10*time.Second), http.MethodPost, h.quotaURL+"api/v1/admit", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "token "+h.quotaToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var a admitAnswer
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("gpu-quota admit: %s %s", resp.Status, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		t.Fatal(err)
	}
	return a
}
