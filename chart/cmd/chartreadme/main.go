// Command chartreadme writes the generated parts of the READMEs (`make chart-readme`): chart/README.md's values
// table from the comments of chart/gpuhub/values.yaml, and the copies of chart/gpuhub/files/z2jh-values.yaml in
// README.md and chart/README.md. Run from the repository root; -check only reports what is out of date.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/gpuhub/gpuhub/chart/internal/valuesdoc"
)

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	fs := flag.NewFlagSet("chartreadme", flag.ContinueOnError)
	root := fs.String("root", ".", "repository root")
	check := fs.Bool("check", false, "write nothing; exit 1 when a README is not current")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	want, err := generate(*root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chartreadme:", err)
		return 1
	}
	stale, err := staleFiles(*root, want)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chartreadme:", err)
		return 1
	}
	for _, path := range stale {
		if *check {
			fmt.Fprintf(os.Stderr, "chartreadme: %s is not current: run `make chart-readme`\n", path)
			continue
		}
		if err := os.WriteFile(filepath.Join(*root, path), []byte(want[path]), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "chartreadme:", err)
			return 1
		}
		fmt.Println("wrote", path)
	}
	if *check && len(stale) > 0 {
		return 1
	}
	return 0
}

// Files the generator reads and writes, relative to the repository root.
const (
	valuesFile     = "chart/gpuhub/values.yaml"
	z2jhValuesFile = "chart/gpuhub/files/z2jh-values.yaml"
	chartReadme    = "chart/README.md"
	topReadme      = "README.md"
)

// generate returns the READMEs as they should be, by path.
func generate(root string) (map[string]string, error) {
	read := func(path string) (string, error) {
		b, err := os.ReadFile(filepath.Join(root, path))
		return string(b), err
	}
	values, err := read(valuesFile)
	if err != nil {
		return nil, err
	}
	rows, err := valuesdoc.Rows([]byte(values))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", valuesFile, err)
	}
	z2jh, err := read(z2jhValuesFile)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, path := range []string{chartReadme, topReadme} {
		doc, err := read(path)
		if err != nil {
			return nil, err
		}
		if doc, err = valuesdoc.Replace(doc, "z2jh-values", valuesdoc.YAMLBlock(z2jh)); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if path == chartReadme {
			if doc, err = valuesdoc.Replace(doc, "values-table", valuesdoc.Table(rows)); err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
		}
		out[path] = doc
	}
	return out, nil
}

// staleFiles lists the paths whose content on disk differs from want, sorted.
func staleFiles(root string, want map[string]string) ([]string, error) {
	var stale []string
	for path, content := range want {
		got, err := os.ReadFile(filepath.Join(root, path))
		if err != nil {
			return nil, err
		}
		if string(got) != content {
			stale = append(stale, path)
		}
	}
	sort.Strings(stale)
	return stale, nil
}
