package api

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/admit"
)

// decodeAdmit takes only what json.Decoder takes, and gives what it gives.
func FuzzDecodeAdmit(f *testing.F) {
	for _, seed := range []string{
		`{"user": "bob", "server": "", "groups": ["students"], "resources": {"nvidia.com/gpu": 1}, "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, "profile": "h100"}`,
		`{"user":"bob","groups":[],"resources":{},"nodeSelector":{}}`,
		`{"user":"b\u00f6b","resources":{"nvidia.com/mig-1g.5gb":-0,"x":9223372036854775807}} trailing`,
		`{"user":"bob","resources":{"nvidia.com/gpu":1.0}}`, `{"user":"bob","resources":{"nvidia.com/gpu":1e3}}`,
		`{"user":"bob","resources":{"nvidia.com/gpu":01}}`, `{"user":"bob","resources":{"nvidia.com/gpu":9223372036854775808}}`,
		`{"user":"bob","user":"carol"}`, `{"USER":"bob"}`, `{"user":"bob","groups":null}`, `{"user":"bob","resources":{"a":1,"a":2}}`,
		`{"user":"bob","waitlist":{"join":true},"userOptions":{"profile":"mig"}}`, `{"user":"\ud800"}`, `{}`, `{`, ``, `[]`,
		"{\"user\":\"bob\xff\"}", `{"user":"bob",}`, `{"user":"bob"}{"user":"carol"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, ok := decodeAdmit(body)
		if !ok {
			return
		}
		var want admit.Request
		if err := json.NewDecoder(bytes.NewReader(body)).Decode(&want); err != nil {
			t.Fatalf("json.Decoder: %v; decodeAdmit accepted it: %+v", err, got)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("decodeAdmit vs json.Decoder (-want +got):\n%s", diff)
		}
	})
}

// The glue's own request (json.dumps's separators) takes the one-pass path.
func TestDecodeAdmitTakesTheGluesRequest(t *testing.T) {
	body := []byte(`{"user": "bob", "server": "gpu", "groups": ["staff", "students"], "resources": {"nvidia.com/mig-3g.20gb": 1}, "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}, "profile": "mig"}`)
	got, ok := decodeAdmit(body)
	if !ok {
		t.Fatalf("decodeAdmit left the glue's request to json.Decoder: %s", body)
	}
	want := admit.Request{User: "bob", Server: "gpu", Groups: []string{"staff", "students"}, Profile: "mig",
		Resources:    map[string]int64{"nvidia.com/mig-3g.20gb": 1},
		NodeSelector: map[string]string{"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
}
