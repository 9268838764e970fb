package netport

import "testing"

func TestFree(t *testing.T) {
	ports, err := Free(5)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p < low || p >= low+span || seen[p] {
			t.Errorf("port %d out of range or repeated in %v", p, ports)
		}
		seen[p] = true
	}
}
