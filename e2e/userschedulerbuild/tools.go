//go:build tools

// Package userschedulerbuild pins the command this module builds: the kube-scheduler of z2jh's user-scheduler.
package userschedulerbuild

import _ "k8s.io/kubernetes/cmd/kube-scheduler"
