package cullerkit

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

func TestCheckPolicy(t *testing.T) {
	var out bytes.Buffer
	if err := CheckPolicy(&out, "../../../e2e/hub/culler-demo.yaml", "gpu-culler policy"); err != nil {
		t.Fatalf("the demo policy does not load: %v\n%s", err, out.String())
	}
	if got, want := out.String(), "../../../e2e/hub/culler-demo.yaml: ok (gpu-culler policy)\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	out.Reset()
	if err := CheckPolicy(&out, "../../../e2e/hub/quota-demo.yaml", ""); err == nil || !strings.Contains(out.String(), `quota-demo.yaml:6:1: unknown key "onUnavailable"`) {
		t.Errorf("a quota policy checked as a culler policy: err %v, output:\n%s", err, out.String())
	}
}

func TestKeys(t *testing.T) {
	keys := PolicyKeys()
	for _, k := range []string{"every", "staleAfter", "gpu", "kinds", "profiles", "cpu", "exempt", "dryRun"} {
		if !slices.Contains(keys, k) {
			t.Errorf("PolicyKeys() = %v, want it to contain %q", keys, k)
		}
	}
}
