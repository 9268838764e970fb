// Package netport picks free TCP ports on loopback for the processes the e2e harness starts.
package netport

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
)

// Ports come from 20000-32767, below Linux's ephemeral range (32768-60999): a port taken with bind(0)
// was seen to be reused by another program's bind(0) or outgoing connection between the check and the
// use (EADDRINUSE in the proxy and the Hub).
const (
	low  = 20000
	span = 12768
)

// given are the ports Free handed out in this process: never again, since the harness picks a component's
// port some time before the component binds it, and another pick meanwhile found it free (a gpu-culler replica
// failed with EADDRINUSE so).
var (
	mu    sync.Mutex
	given = map[int]bool{}
)

// Free returns n distinct ports that were free on 127.0.0.1 a moment ago and that no earlier call in this
// process returned, holding them all open together while choosing so that they differ.
func Free(n int) ([]int, error) {
	mu.Lock()
	defer mu.Unlock()
	var lc net.ListenConfig
	held := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range held {
			_ = l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for tries := 0; len(ports) < n && tries < 1000; tries++ {
		port := low + rand.IntN(span)
		if given[port] {
			continue
		}
		l, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue
		}
		held = append(held, l)
		ports = append(ports, port)
	}
	if len(ports) < n {
		return nil, errors.New("no free ports on loopback in 20000-32767")
	}
	for _, p := range ports {
		given[p] = true
	}
	return ports, nil
}
