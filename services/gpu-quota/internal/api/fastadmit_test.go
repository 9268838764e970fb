package api

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/admit"
)

// decodeAdmit takes only what decodeAdmitJSON (json.Decoder) takes, and gives what it gives.
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
		gluePod, `{"user":"bob","pod":null}`, `{"user":"bob","pod":{"containers":[{"name":"n","resources":{"limits":{"nvidia.com/gpu":"x"}}}]}}`,
		`{"user":"bob","pod":{},"resources":{}}`, `{"user":"bob","pod":[]}`, `{"user":"bob","pod":{"nodeSelector":{"a":"b"}},"POD":{}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, ok := decodeAdmit(body)
		if !ok {
			return
		}
		want, err := decodeAdmitJSON(body)
		if err != nil {
			t.Fatalf("json.Decoder: %v; decodeAdmit accepted it: %+v", err, got)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("decodeAdmit vs json.Decoder (-want +got):\n%s", diff)
		}
	})
}

// The glue's request: the pod cut to its containers' resources and node selector (kit.pod_spec), with
// json.dumps's separators.
const gluePod = `{"user": "bob", "server": "gpu", "groups": ["staff", "students"], "pod": {"containers": [{"name": "notebook", "restartPolicy": null, "resources": {"limits": {"nvidia.com/mig-3g.20gb": "1", "memory": "8G"}, "requests": {}}}], "initContainers": [{"name": "sidecar", "restartPolicy": "Always", "resources": {"limits": {}, "requests": {"nvidia.com/mig-3g.20gb": "1"}}}], "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}}, "profile": "mig"}`

// The glue's request takes the one-pass path, and gpu-quota counts the pod's GPUs the scheduler's way (the app
// container and the sidecar add up).
func TestDecodeAdmitTakesTheGluesPod(t *testing.T) {
	got, ok := decodeAdmit([]byte(gluePod))
	if !ok {
		t.Fatalf("decodeAdmit left the glue's request to json.Decoder: %s", gluePod)
	}
	want := admit.Request{User: "bob", Server: "gpu", Groups: []string{"staff", "students"}, Profile: "mig",
		Resources:    map[string]int64{"nvidia.com/mig-3g.20gb": 2},
		NodeSelector: map[string]string{"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}, FromPod: true}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	again, _ := decodeAdmit([]byte(gluePod))
	if reflect.ValueOf(again.Resources).UnsafePointer() != reflect.ValueOf(got.Resources).UnsafePointer() {
		t.Error("the same pod decoded twice, want its GPUs counted once and shared")
	}
	// e2e/hubint/quota/glue_test.py's pod (test_request_from_the_final_pod): app 1 (limit beats request) +
	// sidecar 1 = 2; init 3 + the sidecar started before it = 4: the pod holds 4.
	final := `{"user": "bob", "server": "", "groups": ["students"], "pod": {"containers": [{"name": "nb", "restartPolicy": null, "resources": {"limits": {"nvidia.com/mig-1g.5gb": "1", "cpu": "2"}, "requests": {"memory": "1Gi", "nvidia.com/mig-1g.5gb": "5"}}}], "initContainers": [{"name": "side", "restartPolicy": "Always", "resources": {"limits": {}, "requests": {"nvidia.com/mig-1g.5gb": "1"}}}, {"name": "init", "restartPolicy": null, "resources": {"limits": {"nvidia.com/mig-1g.5gb": "3"}, "requests": {}}}], "nodeSelector": {"nvidia.com/mig.strategy": "mixed"}}, "profile": "h100"}`
	if got, ok := decodeAdmit([]byte(final)); !ok || got.Resources["nvidia.com/mig-1g.5gb"] != 4 {
		t.Errorf("the glue test's final pod: %v (one pass %v), want 4 MIG 1g.5gb", got.Resources, ok)
	}
	for _, bad := range []string{`{"user":"bob","pod":{},"resources":{}}`, `{"user":"bob","pod":{"containers":[{"resources":{"limits":{"nvidia.com/gpu":"x"}}}]}}`} {
		if _, err := decodeAdmitJSON([]byte(bad)); err == nil {
			t.Errorf("decodeAdmitJSON took %s", bad)
		}
	}
}

// A client's request with the GPUs counted already (the benchmarks' and older glues') takes the one-pass path.
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

// Two spawns of one profile share the groups, resources and node selector decoded from the same text; another
// text gets its own; past maxSharedValues texts, a new one is decoded each time and still right.
func TestDecodeAdmitSharesRepeatedValues(t *testing.T) {
	body := func(user, product string) []byte {
		return []byte(`{"user": "` + user + `", "groups": ["shared-test"], "resources": {"nvidia.com/gpu": 1}, "nodeSelector": {"nvidia.com/gpu.product": "` + product + `"}}`)
	}
	a, okA := decodeAdmit(body("bob", "NVIDIA-H100-80GB-HBM3"))
	b, okB := decodeAdmit(body("carol", "NVIDIA-H100-80GB-HBM3"))
	c, okC := decodeAdmit(body("dave", "Tesla-T4"))
	if !okA || !okB || !okC {
		t.Fatal("decodeAdmit left a glue request to json.Decoder")
	}
	if &a.Groups[0] != &b.Groups[0] || reflect.ValueOf(a.Resources).UnsafePointer() != reflect.ValueOf(b.Resources).UnsafePointer() ||
		reflect.ValueOf(a.NodeSelector).UnsafePointer() != reflect.ValueOf(b.NodeSelector).UnsafePointer() {
		t.Error("the same text decoded twice gave two values, want one shared")
	}
	if reflect.ValueOf(a.NodeSelector).UnsafePointer() == reflect.ValueOf(c.NodeSelector).UnsafePointer() || c.NodeSelector["nvidia.com/gpu.product"] != "Tesla-T4" {
		t.Errorf("another node selector: %v", c.NodeSelector)
	}
	for i := range 2 * maxSharedValues {
		product := fmt.Sprintf("product-%d", i)
		r, ok := decodeAdmit(body("erin", product))
		if !ok || r.NodeSelector["nvidia.com/gpu.product"] != product {
			t.Fatalf("text %d: %v %v", i, ok, r.NodeSelector)
		}
	}
	sharedSelectors.mu.Lock()
	n := len(sharedSelectors.m)
	sharedSelectors.mu.Unlock()
	if n > maxSharedValues {
		t.Errorf("%d node selectors kept, want at most %d", n, maxSharedValues)
	}
}
