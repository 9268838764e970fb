package logging

import (
	"bytes"
	"encoding/json"
	"testing"
)

func TestNew(t *testing.T) {
	var buf bytes.Buffer
	log, err := New(&buf, "json", "warn")
	if err != nil {
		t.Fatal(err)
	}
	log.Info("hidden")
	log.Warn("shown", "user", "alice")
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("not one JSON record: %q: %v", buf.String(), err)
	}
	if rec["msg"] != "shown" || rec["user"] != "alice" {
		t.Errorf("record = %v", rec)
	}
	for _, bad := range [][2]string{{"xml", "info"}, {"text", "loud"}} {
		if _, err := New(&buf, bad[0], bad[1]); err == nil {
			t.Errorf("New(%q, %q) accepted", bad[0], bad[1])
		}
	}
}
