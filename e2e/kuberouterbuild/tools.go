//go:build tools

// Package kuberouterbuild pins kube-router, the real node's NetworkPolicy enforcer (e2e/realnode).
package kuberouterbuild

import (
	_ "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router"
)
