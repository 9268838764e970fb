package contract

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The waitlist choice from user_options as the Hub holds them: the form's checkboxes (true) and an API spawn's
// JSON, read the same way by gpu-quota (admit) and gpu-profiles (the start check).
func TestWaitlistChoiceFrom(t *testing.T) {
	for _, tc := range []struct {
		name, options string
		want          *WaitlistChoice
	}{
		{"join and autostart", `{"profile": "h100", "gpuhub_waitlist": true, "gpuhub_autostart": true, "image": "b"}`, &WaitlistChoice{Join: true, AutoStart: true}},
		{"join", `{"gpuhub_waitlist": true}`, &WaitlistChoice{Join: true}},
		{"API strings", `{"gpuhub_waitlist": "true", "gpuhub_autostart": " No "}`, &WaitlistChoice{Join: true}},
		{"yes and on", `{"gpuhub_waitlist": "YES", "gpuhub_autostart": "on"}`, &WaitlistChoice{Join: true, AutoStart: true}},
		{"autostart alone joins", `{"gpuhub_autostart": 1}`, &WaitlistChoice{Join: true, AutoStart: true}},
		{"not asked", `{"profile": "h100"}`, nil},
		{"asked as false", `{"gpuhub_waitlist": false, "gpuhub_autostart": "no"}`, nil},
		{"other numbers and types", `{"gpuhub_waitlist": 2, "gpuhub_autostart": ["true"]}`, nil},
		{"no options", `null`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var options map[string]any
			if err := json.Unmarshal([]byte(tc.options), &options); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, WaitlistChoiceFrom(options)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
