// Package dcgm reads MIG utilization from a dcgm-exporter endpoint. NVML has
// no utilization counter for MIG instances; DCGM's profiling field
// DCGM_FI_PROF_GR_ENGINE_ACTIVE has one per GPU instance.
package dcgm

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// MetricGREngineActive is the ratio (0-1) of time the graphics/compute engine
// of a GPU instance was active over dcgm-exporter's collection interval.
const MetricGREngineActive = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"

// Key names a MIG GPU instance as dcgm-exporter labels it: the parent GPU
// (UUID label, and gpu index as a fallback) and the GPU_I_ID label.
type Key struct {
	GPUUUID       string
	GPUInstanceID int
}

// Client scrapes one dcgm-exporter /metrics URL.
type Client struct {
	url  string
	http *http.Client
}

// New returns a Client for url (e.g. http://127.0.0.1:9400/metrics).
func New(url string, hc *http.Client) *Client {
	if hc == nil {
		hc = http.DefaultClient
	}
	return &Client{url: url, http: hc}
}

// MIGUtilization returns percent (0-100) per GPU instance.
func (c *Client) MIGUtilization(ctx context.Context) (map[Key]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url, nil)
	if err != nil {
		return nil, fmt.Errorf("dcgm-exporter request: %w", err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("dcgm-exporter: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("dcgm-exporter %s: status %d", c.url, resp.StatusCode)
	}
	return Parse(io.LimitReader(resp.Body, 32<<20))
}

// Parse reads Prometheus text exposition and returns the GR engine activity
// per GPU instance as a percent. Series without GPU_I_ID (whole GPUs) are
// skipped.
func Parse(r io.Reader) (map[Key]float64, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parse dcgm-exporter metrics: %w", err)
	}
	out := map[Key]float64{}
	fam, ok := fams[MetricGREngineActive]
	if !ok {
		return out, nil
	}
	for _, m := range fam.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		gi, err := strconv.Atoi(labels["GPU_I_ID"])
		if err != nil {
			continue
		}
		v, ok := value(m)
		if !ok {
			continue
		}
		pct := min(max(v*100, 0), 100)
		if u := labels["UUID"]; u != "" {
			out[Key{GPUUUID: u, GPUInstanceID: gi}] = pct
		}
	}
	return out, nil
}

func value(m *dto.Metric) (float64, bool) {
	switch {
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue(), true
	case m.GetUntyped() != nil:
		return m.GetUntyped().GetValue(), true
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue(), true
	}
	return 0, false
}
