// Package yield lets a long pass over many items share one CPU with request handlers. With one CPU (a pod limited
// to one core) a handler would otherwise wait for the whole pass: Go takes the processor from a goroutine only
// after 10 ms.
package yield

import "runtime"

// Every is how many items a pass handles between two yields of the processor.
const Every = 256

// After gives up the processor after every Every-th item; i counts the items handled, from 0.
func After(i int) {
	if i%Every == Every-1 {
		runtime.Gosched()
	}
}
