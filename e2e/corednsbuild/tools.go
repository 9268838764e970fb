//go:build tools

// Package corednsbuild pins CoreDNS, the real node's cluster DNS (e2e/realnode).
package corednsbuild

import (
	_ "github.com/coredns/coredns"
)
