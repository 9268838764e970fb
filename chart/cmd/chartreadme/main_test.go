package main

import (
	"testing"
)

// TestReadmesCurrent fails when README.md or chart/README.md differ from what `make chart-readme` writes: the
// values table from chart/gpuhub/values.yaml's comments, and chart/gpuhub/files/z2jh-values.yaml verbatim.
func TestReadmesCurrent(t *testing.T) {
	want, err := generate("../../..")
	if err != nil {
		t.Fatal(err)
	}
	stale, err := staleFiles("../../..", want)
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range stale {
		t.Errorf("%s is not current: run `make chart-readme` (values table from %s, %s verbatim)", path, valuesFile, z2jhValuesFile)
	}
}
