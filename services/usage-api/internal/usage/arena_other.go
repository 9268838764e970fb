//go:build !unix

package usage

// mapSamples returns n bytes from the Go heap (mapped false): this platform's history stays in it.
func mapSamples(n int) (mem []byte, mapped bool) { return make([]byte, n), false }
