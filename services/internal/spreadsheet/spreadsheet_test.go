package spreadsheet

import "testing"

func TestText(t *testing.T) {
	for in, want := range map[string]string{
		"": "", "alice": "alice", "=HYPERLINK(\"x\")": "'=HYPERLINK(\"x\")", "+1": "'+1", "-1": "'-1", "@sum": "'@sum",
		"\tx": "'\tx", "\rx": "'\rx", "a=b": "a=b",
	} {
		if got := Text(in); got != want {
			t.Errorf("Text(%q) = %q, want %q", in, got, want)
		}
	}
}
