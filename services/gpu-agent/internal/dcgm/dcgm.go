// Package dcgm reads MIG utilization from a dcgm-exporter endpoint. NVML has
// no utilization counter for MIG instances; DCGM's profiling field
// DCGM_FI_PROF_GR_ENGINE_ACTIVE has one per GPU instance.
package dcgm

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"time"

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

// Defaults of Options.
const (
	// DefaultTimeout bounds one scrape: a hung exporter must not hold up
	// the sample (the agent lowers it to half the sampling interval).
	DefaultTimeout = 2 * time.Second
	// DefaultMaxAge is the oldest exposition timestamp accepted: twice
	// dcgm-exporter's default collection interval (30 s).
	DefaultMaxAge = time.Minute
)

// Options configure a Client.
type Options struct {
	// HTTPClient does the requests (nil: http.DefaultClient); Timeout
	// applies on top of whatever it sets.
	HTTPClient *http.Client
	// Timeout bounds one scrape, body included (0: DefaultTimeout).
	Timeout time.Duration
	// MaxAge drops values whose exposition timestamp is older (0:
	// DefaultMaxAge). dcgm-exporter writes no timestamps, so its values are
	// as fresh as the scrape; a federating proxy or an exporter that does
	// write them may serve the last value of a wedged DCGM, which must not
	// pass for a measurement of now.
	MaxAge time.Duration
	// Now is the clock that MaxAge is measured against.
	Now func() time.Time
}

// Client scrapes one dcgm-exporter /metrics URL.
type Client struct {
	url  string
	opts Options
}

// New returns a Client for url (e.g. http://127.0.0.1:9400/metrics).
func New(url string, o Options) *Client {
	if o.HTTPClient == nil {
		o.HTTPClient = http.DefaultClient
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.MaxAge <= 0 {
		o.MaxAge = DefaultMaxAge
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Client{url: url, opts: o}
}

// MIGUtilization returns percent (0-100) per GPU instance, only values
// measured within MaxAge, within Timeout or not at all.
func (c *Client) MIGUtilization(ctx context.Context) (map[Key]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url, nil)
	if err != nil {
		return nil, fmt.Errorf("dcgm-exporter request: %w", err)
	}
	resp, err := c.opts.HTTPClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("dcgm-exporter (timeout %s): %w", c.opts.Timeout, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("dcgm-exporter %s: status %d", c.url, resp.StatusCode)
	}
	samples, err := parse(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return nil, err
	}
	oldest := c.opts.Now().Add(-c.opts.MaxAge)
	out := make(map[Key]float64, len(samples))
	for k, s := range samples {
		if !s.at.IsZero() && s.at.Before(oldest) {
			continue
		}
		out[k] = s.pct
	}
	return out, nil
}

// sample is one GPU instance's value and its exposition timestamp (zero
// when the line has none).
type sample struct {
	pct float64
	at  time.Time
}

// parse reads Prometheus text exposition and returns the GR engine activity
// per GPU instance as a percent. Series without GPU_I_ID (whole GPUs) are
// skipped.
func parse(r io.Reader) (map[Key]sample, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parse dcgm-exporter metrics: %w", err)
	}
	out := map[Key]sample{}
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
		if err != nil || gi < 0 {
			continue
		}
		v, ok := value(m)
		if !ok || math.IsNaN(v) {
			// NaN is DCGM's "no value" (and min/max would pass it through as a percent).
			continue
		}
		s := sample{pct: min(max(v*100, 0), 100)}
		if m.TimestampMs != nil {
			s.at = time.UnixMilli(m.GetTimestampMs())
		}
		if u := labels["UUID"]; u != "" {
			out[Key{GPUUUID: u, GPUInstanceID: gi}] = s
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
