package contract

import (
	"strings"
	"time"

	"github.com/gpuhub/gpuhub/services/internal/gpu"
)

// gpu-quota's answers (services/gpu-quota/openapi.yaml), under {prefix}api/v1/.

// What gpu-quota's onUnavailable says to do when it cannot decide (its policy's onUnavailable).
const (
	Open   = "open"   // admit unchecked; offer every choice
	Closed = "closed" // refuse GPU spawns; disable every GPU choice
)

// WaitlistChoice is what a spawn says about gpu-quota's waitlist (the admission request's "waitlist").
type WaitlistChoice struct {
	// Join queues the server when no unit of what it asks is free for the user.
	Join bool `json:"join"`
	// AutoStart starts the server through the Hub when the user's turn comes.
	AutoStart bool `json:"autoStart"`
}

// WaitlistChoiceFrom reads the choice from a spawn's user_options, nil when it does not ask to join: the spawn
// form's checkboxes give gpuhub_waitlist / gpuhub_autostart true, an API spawn's JSON true, 1, "true", "1",
// "yes" or "on". Starting by itself when the turn comes means waiting in line first, so gpuhub_autostart alone
// joins too.
func WaitlistChoiceFrom(options map[string]any) *WaitlistChoice {
	autoStart := yes(options["gpuhub_autostart"])
	if !autoStart && !yes(options["gpuhub_waitlist"]) {
		return nil
	}
	return &WaitlistChoice{Join: true, AutoStart: autoStart}
}

func yes(v any) bool {
	switch v := v.(type) {
	case bool:
		return v
	case float64:
		return v == 1
	case string:
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "1", "true", "yes", "on":
			return true
		}
	}
	return false
}

// AssessRequest is the body of POST assess: which of several spawn choices the policy would admit for a user
// now (gpu-profiles, at every render of the spawn form).
type AssessRequest struct {
	User string `json:"user"`
	// Server is the server the form is for ("" the default one): like admit, its own pods and reservation are
	// left out of what the user holds.
	Server string `json:"server"`
	// Groups are the user's Hub groups as the Hub sees them now; null: gpu-quota's copy of the Hub's groups
	// ([] is "no groups").
	Groups  []string       `json:"groups"`
	Options []AssessOption `json:"options"`
}

// AssessOption is one spawn choice: the GPU resources and nodeSelector its pod would have.
type AssessOption struct {
	ID           string            `json:"id"`
	Resources    map[string]int64  `json:"resources"`
	NodeSelector map[string]string `json:"nodeSelector"`
}

// Verdict is the policy's answer for one option. Reason is one of quota's reasons (never none_free: what is
// free is gpu-profiles' business); Message is the user's plain words when refused. The waitlist's part is
// told apart, since gpu-profiles counts free units from its own inventory, which does not see holds.
type Verdict struct {
	ID      string `json:"id"`
	Allow   bool   `json:"allow"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
	// HeldForOthers is how many units of the option's GPU class the waitlist holds right now for other people
	// (or the user's other servers): free on the nodes, but admit refuses them to this server (reason
	// waitlist). 0 without the waitlist.
	HeldForOthers int64 `json:"heldForOthers"`
	// HeldForYouUntil is when the unit the waitlist holds for this server (its turn) passes to the next in
	// line; left out when none is held for it.
	HeldForYouUntil time.Time `json:"heldForYouUntil,omitzero"`
}

// Unavailable is the body of gpu-quota's 503 for admit and assess (and of a standby's while no replica decides):
// an Error, with the policy's onUnavailable once the replica has loaded a policy. A reader that has not heard
// the mode from an answer yet (a restarted Hub or gpu-profiles, during a handover) applies this one instead of
// its own default.
type Unavailable struct {
	Status        int    `json:"status"`
	Message       string `json:"message"`
	OnUnavailable string `json:"onUnavailable,omitempty"`
}

// Assessment is the body of assess's answer, option by option in the request's order.
type Assessment struct {
	Options []Verdict `json:"options"`
	// OnUnavailable is Open or Closed: what the policy says to do while gpu-quota cannot answer.
	OnUnavailable string `json:"onUnavailable"`
}

// VerdictWatchRequest is the body of POST assess/watch: every spawn choice the forms may show (gpu-profiles
// watches the union of its catalog's GPU choices once, for all its forms).
type VerdictWatchRequest struct {
	Options []AssessOption `json:"options"`
}

// Kinds of VerdictLine.
const (
	// WatchUser is one user's verdicts: the line replaces whatever the reader held for the user.
	WatchUser = "user"
	// WatchLeft is a user who left the Hub's directory: forget their verdicts.
	WatchLeft = "left"
	// WatchSynced follows the first line of every user of the directory: the table is complete from here on.
	WatchSynced = "synced"
	// WatchKeepalive says the stream is alive while nothing changed.
	WatchKeepalive = "keepalive"
)

// VerdictLine is one line of assess/watch's answer (NDJSON). A user line is what assess would answer for the
// user's default server (server ""), with the groups of gpu-quota's copy of the Hub directory.
type VerdictLine struct {
	Kind string `json:"kind"`
	User string `json:"user,omitempty"`
	// Groups are the groups the verdicts were decided with (gpu-quota's directory); left out: none. A form for
	// other groups is not answered by this line.
	Groups []string `json:"groups,omitempty"`
	// Options are the verdicts, one per watched option, in the request's order.
	Options []Verdict `json:"options,omitempty"`
	// OnUnavailable is Open or Closed, as in Assessment.
	OnUnavailable string `json:"onUnavailable,omitempty"`
}

// Place is one server's place in a queue, as its user and the admins see it.
type Place struct {
	User        string   `json:"user"`
	Server      string   `json:"server"`
	Class       string   `json:"class"`
	Kind        gpu.Kind `json:"kind"`
	Description string   `json:"description"`
	// State is waiting, held (a unit is held for it: its turn) or started (its server started from the queue
	// recently; the panel says so).
	State string `json:"state"`
	// Position is 0 while a unit is held for the server (its turn) or once it started, else its place among those
	// waiting (1 is next).
	Position int `json:"position"`
	// Waiting is how many wait in this queue (held entries not counted).
	Waiting   int       `json:"waiting"`
	JoinedAt  time.Time `json:"joinedAt"`
	HeldUntil time.Time `json:"heldUntil,omitzero"`
	StartedAt time.Time `json:"startedAt,omitzero"`
	// Estimate is when a unit may free for it; zero when nothing tells.
	Estimate       time.Time `json:"estimate,omitzero"`
	AutoStart      bool      `json:"autoStart"`
	StartRequested bool      `json:"startRequested"`
	// FairShare is the user's fair-share factor (1 = used nothing recently).
	FairShare float64 `json:"fairShare"`
	// Blocked says why the user cannot be served from the queue now (over quota); it keeps its place.
	Blocked string `json:"blocked,omitempty"`
	// Message says it all in plain words.
	Message string `json:"message"`
}

// Places is the body of GET waitlist (every queue) and GET users/{name}/waitlist (one user's places).
type Places struct {
	Places []Place `json:"places"`
}

// Contention is one class someone waits for.
type Contention struct {
	Class   string   `json:"class"`
	Kind    gpu.Kind `json:"kind"`
	Waiting int      `json:"waiting"`
}

// Contended is the body of GET waitlist/contended (gpu-culler: the classes someone waits for).
type Contended struct {
	AsOf    time.Time    `json:"asOf"`
	Classes []Contention `json:"classes"`
}

// Explanation is the body of GET explain: the effective policy of one user and why.
type Explanation struct {
	User   string   `json:"user"`
	Groups []string `json:"groups"`
	// Text is every value with its source, as `gpuhub policy explain` prints it.
	Text      string         `json:"text"`
	Effective EffectiveValue `json:"effective"`
}

// EffectiveValue is each effective value of a user's policy (unlimited is null) with its source.
type EffectiveValue struct {
	Exempt         Sourced            `json:"exempt"`
	Priority       Sourced            `json:"priority"`
	MaxGPUs        Sourced            `json:"maxGPUs"`
	MaxGPUsPerKind map[string]Sourced `json:"maxGPUsPerKind"`
	MaxServers     Sourced            `json:"maxServers"`
	Budgets        map[string]Sourced `json:"budgets"` // by window, "24h", "7d"
	Weights        map[string]Sourced `json:"weights"`
	AllowedKinds   Sourced            `json:"allowedKinds"` // value null: every kind
	OnUnavailable  string             `json:"onUnavailable"`
}

// Sourced is one effective value and the entry it comes from ("user alice", "group students", "default",
// "built-in").
type Sourced struct {
	Value any    `json:"value"`
	From  string `json:"from"`
}
