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

// TestFreeNeverTwice: ports handed out earlier in the process are not handed out again, even once closed (a
// component may not have bound its port yet).
func TestFreeNeverTwice(t *testing.T) {
	seen := map[int]bool{}
	for range 200 {
		ports, err := Free(3)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ports {
			if seen[p] {
				t.Fatalf("port %d handed out twice", p)
			}
			seen[p] = true
		}
	}
}
