package agent

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

const (
	namespace = "gpuhub"
	subsystem = "agent"
)

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(namespace, subsystem, name), help, labels, nil)
}

var (
	deviceLabels = []string{"node", "gpu", "uuid", "mig", "backend"}
	podLabels    = []string{"node", "gpu", "uuid", "mig", "pod", "namespace", "user", "backend"}

	descInfo = desc("info", "Always 1; names the node and the backend (nvml, or simulated when no GPU is present).",
		"node", "backend")
	descGPUUtil = desc("gpu_utilization_ratio",
		"Utilization of a GPU or MIG device (0-1). Absent when no component measures it (a GPU in MIG mode; a MIG device without dcgm-exporter).",
		append(deviceLabels, "source")...)
	descGPUUp = desc("gpu_up", "1 if the GPU was read in the last sample, 0 if reading it failed (see the snapshot's gpus[].error).",
		"node", "gpu", "uuid", "backend")
	descGPUMemUsed  = desc("gpu_memory_used_bytes", "Memory used on a GPU or MIG device.", deviceLabels...)
	descGPUMemTotal = desc("gpu_memory_total_bytes", "Memory of a GPU or MIG device.", deviceLabels...)
	descPodUtil     = desc("pod_sm_utilization_ratio",
		"SM utilization (0-1) of a pod's processes on one device. Absent when unknown.", append(podLabels, "source")...)
	descPodMem     = desc("pod_memory_used_bytes", "GPU memory used by a pod's processes on one device.", podLabels...)
	descSampleDur  = desc("sample_duration_seconds", "Duration of the last sample (backend reading and attribution).")
	descSampleOK   = desc("last_sample_success", "1 if the last sample succeeded, 0 otherwise.")
	descSampleTime = desc("last_sample_timestamp_seconds", "Unix time of the last successful sample (the snapshot's sampledAt).")
	descFailed     = desc("consecutive_failed_samples",
		"Samples that failed (or did not finish within the interval) since the last success; /readyz fails at --max-failed-samples.")
	descUnattrib = desc("unattributed_processes", "GPU processes in the last sample that belong to no pod (host processes, or exited before attribution).")
)

// collector emits the latest snapshot at scrape time, so series of deleted
// pods or destroyed MIG devices vanish with the next sample.
type collector struct {
	a *Agent
}

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descInfo, descGPUUp, descGPUUtil, descGPUMemUsed, descGPUMemTotal, descPodUtil, descPodMem,
		descSampleDur, descSampleOK, descSampleTime, descFailed, descUnattrib} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	st := c.a.state()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	gauge(descInfo, 1, c.a.node, string(c.a.backend))
	gauge(descSampleDur, st.duration.Seconds())
	ok := 0.0
	if st.health.OK {
		ok = 1
	}
	gauge(descSampleOK, ok)
	gauge(descFailed, float64(st.health.ConsecutiveFailures))
	snap := st.snap
	if snap == nil {
		return
	}
	gauge(descSampleTime, float64(snap.SampledAt.UnixNano())/1e9)
	gauge(descUnattrib, float64(st.unattributed))

	backend := string(snap.Backend)
	for _, g := range snap.GPUs {
		idx := strconv.Itoa(g.Index)
		if g.Error != "" {
			gauge(descGPUUp, 0, snap.Node, idx, g.UUID, backend)
			continue
		}
		gauge(descGPUUp, 1, snap.Node, idx, g.UUID, backend)
		l := []string{snap.Node, idx, g.UUID, "", backend}
		if g.UtilizationPercent != nil {
			gauge(descGPUUtil, *g.UtilizationPercent/100, append(l, g.UtilizationSource)...)
		}
		gauge(descGPUMemUsed, float64(g.MemoryUsedBytes), l...)
		gauge(descGPUMemTotal, float64(g.MemoryTotalBytes), l...)
		for _, m := range g.MIGDevices {
			ml := []string{snap.Node, idx, m.UUID, m.Profile, backend}
			if m.UtilizationPercent != nil {
				gauge(descGPUUtil, *m.UtilizationPercent/100, append(ml, m.UtilizationSource)...)
			}
			gauge(descGPUMemUsed, float64(m.MemoryUsedBytes), ml...)
			gauge(descGPUMemTotal, float64(m.MemoryTotalBytes), ml...)
		}
	}
	for _, p := range snap.Pods {
		for _, d := range p.Devices {
			l := []string{snap.Node, strconv.Itoa(d.Index), d.UUID, d.Profile, p.Name, p.Namespace, p.User, backend}
			if d.SMUtilPercent != nil {
				gauge(descPodUtil, *d.SMUtilPercent/100, append(l, d.UtilizationSource)...)
			}
			gauge(descPodMem, float64(d.MemoryUsedBytes), l...)
		}
	}
}

// newCallHistogram is the per-call NVML cost (benchmarks.md B6).
func newCallHistogram() *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: namespace, Subsystem: subsystem, Name: "nvml_call_duration_seconds",
		Help:    "Duration of NVML calls, by call.",
		Buckets: []float64{1e-6, 5e-6, 1e-5, 5e-5, 1e-4, 5e-4, 1e-3, 5e-3, 1e-2, 5e-2, 0.1, 0.5},
	}, []string{"call"})
}
