package yield

import "testing"

// After returns at once, item after item; where it yields is i%Every == Every-1 (the processor is given up,
// which a test cannot see, so this only runs the path).
func TestAfter(t *testing.T) {
	for i := range 3 * Every {
		After(i)
	}
}
