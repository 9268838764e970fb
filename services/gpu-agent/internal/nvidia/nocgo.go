//go:build !cgo

package nvidia

import (
	"context"
	"errors"

	"github.com/gpuhub/gpuhub/services/gpu-agent/internal/reading"
)

// ErrNoCgo is what the NVML backend says in a binary built without cgo.
var ErrNoCgo = errors.New("this gpu-agent was built with CGO_ENABLED=0, so it has no NVML backend " +
	"(go-nvml needs cgo): rebuild with CGO_ENABLED=1, or start with --backend=simulated")

// Backend is the stub of a binary built without cgo.
type Backend struct{}

// Open always fails with ErrNoCgo.
func Open(string, Settings) (*Backend, error) { return nil, ErrNoCgo }

// Sample always fails with ErrNoCgo.
func (*Backend) Sample(context.Context) (reading.Reading, error) {
	return reading.Reading{}, ErrNoCgo
}

// Shutdown does nothing.
func (*Backend) Shutdown() error { return nil }
