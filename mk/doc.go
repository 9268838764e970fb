// Package mk has no code: its tests check the Makefile and the fragments here (mk_test.go). It sits beside the
// files it reads, in the root module, so `make unit` (go test ./...) runs them.
package mk
