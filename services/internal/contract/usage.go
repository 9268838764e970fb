package contract

import (
	"encoding/json"
	"time"

	"github.com/gpuhub/gpuhub/services/internal/gpu"
	"github.com/gpuhub/gpuhub/services/internal/notice"
)

// The usage API's answers (gpu-usage, services/usage-api/openapi.yaml), under {prefix}api/v1/.

// Telemetry is one running Hub server's GPU telemetry as a culler needs it (GET servers): what the server
// holds and how busy its own allocation is, one line per server. Read by gpu-culler and `gpuhub status`.
type Telemetry struct {
	User      string `json:"user"`
	Server    string `json:"server"`
	Pod       string `json:"pod"`
	Namespace string `json:"namespace"`
	Node      string `json:"node"`
	// Kind and Class are those of the server's first unit (units in resource-name order); a server holding
	// units of several kinds reports the first.
	Kind          gpu.Kind `json:"kind"`
	Class         string   `json:"class"`
	AllocatedGPUs float64  `json:"allocatedGPUs"`
	// SMUtilPercent is the highest utilization over the server's units (each as the agent measures it for that
	// unit); nil when any unit's is unknown, with UtilizationUnknownReason saying why.
	SMUtilPercent            *float64 `json:"smUtilPercent"`
	UtilizationUnknownReason string   `json:"utilizationUnknownReason"`
	// MemoryUsedBytes is the GPU memory of the server's processes, summed over its units.
	MemoryUsedBytes uint64 `json:"memoryUsedBytes"`
	Stale           bool   `json:"stale"`
	StaleReason     string `json:"staleReason"`
	Simulated       bool   `json:"simulated"`
}

// ServersResponse is the body of GET servers.
type ServersResponse struct {
	SampledAt time.Time   `json:"sampledAt"`
	Servers   []Telemetry `json:"servers"`
}

// Share is a user's live share: what they hold and how much of a GPU's time they use, summed over their units.
//
// Held (AllocatedGPUs) is GPU-equivalents: a whole GPU 1, a MIG instance g/slices (3g.20gb on an A100: 3/7), a
// time-sliced replica 1/replicas (a 4-way T4: 1/4). Used (UsedGPUs) is the fraction of a physical GPU's time the
// user's processes keep busy: SM utilization / 100 x the unit's scale (gpu.Allocation.UtilizationScale). On a 4-way time-sliced
// T4, one user alone keeping it 100 % busy holds 0.25 and uses 1.0; four users each keeping it 25 % busy hold
// and use 0.25 each, 1.0 together; one busy and three idle use 1.0, 0, 0, 0. A 3g.20gb MIG instance 50 % busy
// holds 3/7 and uses 3/14. Used may exceed held on shared GPUs: time-slicing does not cap a replica.
type Share struct {
	AllocatedGPUs float64 `json:"allocatedGPUs"`
	// UsedGPUs is null when the utilization of any held unit is unknown (stale telemetry, MIG without DCGM).
	UsedGPUs         *float64 `json:"usedGPUs"`
	MemoryUsedBytes  uint64   `json:"memoryUsedBytes"`
	MemoryTotalBytes uint64   `json:"memoryTotalBytes"`
}

// GPU is one allocated unit (a whole GPU, a MIG instance or a time-sliced replica). Share is what it holds in
// GPU-equivalents (1, g/slices, 1/replicas); SMUtilPercent is the pod's utilization as the agent measures it
// (of the whole GPU for whole and time-sliced units, per process through NVML; of the instance for MIG, through
// DCGM); UsedGPUs is the fraction of a physical GPU's time it keeps busy, SMUtilPercent / 100 x UtilizationScale: a
// time-sliced T4 replica at 25 % uses 0.25 while holding 0.25, alone at 100 % it uses 1.0; a 3g.20gb instance
// at 50 % uses 3/14.
type GPU struct {
	Kind              gpu.Kind `json:"kind"`
	Resource          string   `json:"resource"`
	Product           string   `json:"product"`
	Profile           string   `json:"profile,omitempty"`
	Class             string   `json:"class"`
	Share             float64  `json:"share"`
	ShareNumerator    int64    `json:"shareNumerator"`
	ShareDenominator  int64    `json:"shareDenominator"`
	Description       string   `json:"description"`
	UUID              string   `json:"uuid,omitempty"`
	SMUtilPercent     *float64 `json:"smUtilPercent"`
	UtilizationSource string   `json:"utilizationSource"`
	UsedGPUs          *float64 `json:"usedGPUs"` // null when SMUtilPercent is
	MemoryUsedBytes   uint64   `json:"memoryUsedBytes"`
	MemoryTotalBytes  uint64   `json:"memoryTotalBytes"`
	// Stale is true when the node's telemetry is stale: utilization is then unknown, StaleReason says why.
	Stale       bool   `json:"stale"`
	StaleReason string `json:"staleReason,omitempty"`
	// UtilizationUnknownReason says in plain words why SMUtilPercent is null.
	UtilizationUnknownReason string `json:"utilizationUnknownReason,omitempty"`
	// UtilizationScale is what SMUtilPercent is a fraction of, in GPUs (gpu.Allocation.UtilizationScale): the
	// usage API's own bookkeeping for right-size profiles, not on the wire.
	UtilizationScale float64 `json:"-"`
}

// Server is one running single-user server that holds GPUs.
type Server struct {
	Name          string   `json:"name"`
	Pod           string   `json:"pod"`
	Namespace     string   `json:"namespace"`
	Node          string   `json:"node"`
	Ready         bool     `json:"ready"`
	AllocatedGPUs float64  `json:"allocatedGPUs"`
	UsedGPUs      *float64 `json:"usedGPUs"`
	Stale         bool     `json:"stale"`
	StaleReason   string   `json:"staleReason,omitempty"`
	Simulated     bool     `json:"simulated"`
	GPUs          []GPU    `json:"gpus"`
}

// Notice is a pending notice of an acting service (gpu-quota, the culler, ...) on one of a user's pods: the
// pod annotation gpuhub.io/notice-<service> (services/internal/notice), with the server it is on.
type Notice struct {
	notice.Notice
	Server string `json:"server"`
}

// ClassStats is the cluster's inventory and use of one GPU class.
type ClassStats struct {
	Class            string   `json:"class"`
	Kind             gpu.Kind `json:"kind"`
	Product          string   `json:"product"`
	Profile          string   `json:"profile,omitempty"`
	CapacityUnits    int64    `json:"capacityUnits"`
	AllocatedUnits   int64    `json:"allocatedUnits"`
	CapacityGPUs     float64  `json:"capacityGPUs"`
	AllocatedGPUs    float64  `json:"allocatedGPUs"`
	UsedGPUs         float64  `json:"usedGPUs"`         // known part
	UsedUnknownGPUs  float64  `json:"usedUnknownGPUs"`  // allocated GPUs whose utilization is unknown
	SMUtilPercent    *float64 `json:"smUtilPercent"`    // used / the class's GPUs (capacity), known part
	MemoryUsedBytes  uint64   `json:"memoryUsedBytes"`  // of allocated units
	MemoryTotalBytes uint64   `json:"memoryTotalBytes"` // of allocated units
}

// Cluster is the cluster-wide view; it names no user.
type Cluster struct {
	SampledAt       time.Time    `json:"sampledAt"`
	IntervalSeconds float64      `json:"intervalSeconds"`
	Simulated       bool         `json:"simulated"`
	Nodes           int          `json:"gpuNodes"`
	Agents          int          `json:"agents"`
	StaleAgents     int          `json:"staleAgents"`
	CapacityGPUs    float64      `json:"capacityGPUs"`
	AllocatedGPUs   float64      `json:"allocatedGPUs"`
	UsedGPUs        float64      `json:"usedGPUs"`
	UsedUnknownGPUs float64      `json:"usedUnknownGPUs"`
	Classes         []ClassStats `json:"classes"`
	// AgentStatus is the freshness of every node agent's telemetry, by node name.
	AgentStatus []AgentStatus `json:"agentStatus"`
}

// AgentStatus is how fresh one node's GPU agent telemetry is. It names no user.
type AgentStatus struct {
	Node string `json:"node"`
	// SampledAt is when the agent sampled (its clock); null when it never answered.
	SampledAt *time.Time `json:"sampledAt"`
	// AgeSeconds is the telemetry's age at the tick: the longer of now - sampledAt and the time since the
	// usage API first fetched that sample (which holds when the agent's clock is ahead); null without a snapshot.
	AgeSeconds  *float64 `json:"ageSeconds"`
	Stale       bool     `json:"stale"`
	StaleReason string   `json:"staleReason,omitempty"`
}

// ClusterResponse is the body of GET cluster. It names no user, so any authenticated user may read it.
type ClusterResponse struct {
	Cluster
	// Users is how many users hold GPUs now (a count, no names).
	Users int `json:"users"`
}

// Window is GPU-hours over one window.
type Window struct {
	Allocated   float64    `json:"allocated"`
	Used        float64    `json:"used"`
	UsedUnknown float64    `json:"usedUnknown"`
	From        *time.Time `json:"from,omitempty"`
	To          *time.Time `json:"to,omitempty"`
	// ByClass breaks a custom window down by GPU class.
	ByClass []ClassHours `json:"byClass,omitempty"`
}

// ClassHours is GPU-hours of one GPU class.
type ClassHours struct {
	Kind        gpu.Kind `json:"kind"`
	Class       string   `json:"class"`
	Allocated   float64  `json:"allocated"`
	Used        float64  `json:"used"`
	UsedUnknown float64  `json:"usedUnknown"`
}

// UserResponse is the body of GET me and GET users/{name}.
type UserResponse struct {
	User            string             `json:"user"`
	Groups          []string           `json:"groups"`
	SampledAt       *time.Time         `json:"sampledAt"`
	IntervalSeconds float64            `json:"intervalSeconds"`
	Simulated       bool               `json:"simulated"`
	Stale           bool               `json:"stale"`
	StaleReason     string             `json:"staleReason,omitempty"`
	Share           Share              `json:"share"`
	Servers         []Server           `json:"servers"`
	GPUHours        map[string]*Window `json:"gpuHours"`
	GPUHoursStatus  string             `json:"gpuHoursStatus"`
	GPUHoursReason  string             `json:"gpuHoursReason,omitempty"`
	// Notices are the pending notices on the user's pods (gpu-quota, the culler, ...), one per service.
	Notices []Notice `json:"notices"`
	// Budget is gpu-quota's QuotaStatus for the user (GET {quota-url}api/v1/users/{name}/quota), or
	// {"status":"unavailable","reason":…}; null when no quota service is configured.
	Budget   json.RawMessage `json:"budget"`
	IdleCull any             `json:"idleCull"`
	// History is the user's recent share, oldest first: [{"t", "allocatedGPUs", "usedGPUs", "smUtilPercent",
	// "memoryUsedBytes"}, ...]. The usage API writes it last, from its own fast encoding (and leaves it nil here).
	History json.RawMessage `json:"history,omitempty"`
}

// UserSummary is one line of GET users.
type UserSummary struct {
	Name          string             `json:"name"`
	Groups        []string           `json:"groups"`
	Servers       int                `json:"servers"`
	AllocatedGPUs float64            `json:"allocatedGPUs"`
	UsedGPUs      *float64           `json:"usedGPUs"`
	Simulated     bool               `json:"simulated"`
	Stale         bool               `json:"stale"`
	StaleReason   string             `json:"staleReason,omitempty"`
	GPUHours      map[string]*Window `json:"gpuHours"`
	// GPUHoursStatus and GPUHoursReason as in UserResponse.
	GPUHoursStatus string `json:"gpuHoursStatus"`
	GPUHoursReason string `json:"gpuHoursReason,omitempty"`
}

// Pagination follows the Hub's own (offset, limit, total, next).
type Pagination struct {
	Offset int       `json:"offset"`
	Limit  int       `json:"limit"`
	Total  int       `json:"total"`
	Next   *NextPage `json:"next"`
}

// NextPage says how to get the next page.
type NextPage struct {
	Offset int    `json:"offset"`
	Limit  int    `json:"limit"`
	URL    string `json:"url"`
}

// UsersResponse is the body of GET users.
type UsersResponse struct {
	Items      []UserSummary `json:"items"`
	Pagination Pagination    `json:"_pagination"`
}

// RollingResponse is the body of GET gpu-hours (gpu-quota's budgets).
type RollingResponse struct {
	AsOf time.Time `json:"asOf"`
	// Windows has the windows as asked ("24h", "7d"): per user, allocated GPU-hours by class.
	Windows map[string]map[string]map[string]float64 `json:"windows"`
}

// DecayedResponse is the body of GET gpu-hours/decayed (gpu-quota's fair-share order).
type DecayedResponse struct {
	AsOf     time.Time `json:"asOf"`
	HalfLife string    `json:"halfLife"`
	Horizon  string    `json:"horizon"`
	// Users has, per user, allocated GPU-hours by class, each hour weighted by 2^(-age/halfLife).
	Users map[string]map[string]float64 `json:"users"`
}

// WaitlistStateResponse is the body of GET waitlist/state (gpu-quota's waitlist, kept in the ledger's database).
type WaitlistStateResponse struct {
	Version int64 `json:"version"`
	// State is the JSON object last written; null while nothing is stored (version 0).
	State     json.RawMessage `json:"state"`
	UpdatedAt *time.Time      `json:"updatedAt,omitempty"`
}

// WaitlistWrite is the body of PUT waitlist/state (with If-Match: "<version>"); nothing else may be in it.
type WaitlistWrite struct {
	State json.RawMessage `json:"state"`
}

// WaitlistWriteResponse is the body of a successful PUT waitlist/state.
type WaitlistWriteResponse struct {
	Version   int64     `json:"version"`
	UpdatedAt time.Time `json:"updatedAt"`
}
