// Package nvidia is the NVML backend: the only code in gpuhub that talks to
// the NVIDIA driver. The NVML handle is injected (nvml.Interface), so tests
// run against go-nvml's mock servers and production against libnvidia-ml,
// which go-nvml dlopens at Init: a binary built with this package starts on
// a machine without the library as long as Init is never called. go-nvml
// needs cgo; without it (CGO_ENABLED=0) this package builds a stub whose
// Open explains that, so the simulated backend still builds anywhere.
package nvidia

import (
	"context"
	"log/slog"
	"time"

	"github.com/gpuhub/gpuhub/services/gpu-agent/internal/dcgm"
)

// MIGUtilizationSource gives utilization per MIG GPU instance (dcgm.Client).
type MIGUtilizationSource interface {
	MIGUtilization(ctx context.Context) (map[dcgm.Key]float64, error)
}

// Settings configure a Backend apart from the NVML handle.
type Settings struct {
	// Now is the clock; it also times NVML calls.
	Now func() time.Time
	// Interval is the sampling interval, used for the first utilization window.
	Interval time.Duration
	// Observe, when set, receives the duration of every NVML call by name
	// (the gpuhub_agent_nvml_call_duration_seconds histogram, --bench timings).
	Observe func(call string, d time.Duration)
	// MIG, when set, supplies MIG utilization (dcgm-exporter).
	MIG    MIGUtilizationSource
	Logger *slog.Logger
}
