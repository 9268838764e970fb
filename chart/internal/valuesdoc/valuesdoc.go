// Package valuesdoc writes the chart README's generated parts: the values table from the comments of values.yaml
// (helm-docs' convention: `# -- description` above a key, `# @default -- text` to show instead of the value), and
// verbatim copies of files between markers. helm-docs itself is not installable here; this is the part of it the
// chart uses.
package valuesdoc

import (
	"errors"
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"
)

// Row is one documented value.
type Row struct {
	Key, Default, Description string
}

// Rows reads values.yaml and returns a row per key with a `# --` comment, in file order. Every value must be
// documented, itself or through a documented parent: an undocumented one is an error naming it.
func Rows(values []byte) ([]Row, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(values, &doc); err != nil {
		return nil, fmt.Errorf("values.yaml: %w", err)
	}
	if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, errors.New("values.yaml: not a mapping")
	}
	var rows []Row
	var undocumented []string
	walk(doc.Content[0], "", &rows, &undocumented)
	if len(undocumented) > 0 {
		return nil, fmt.Errorf("values.yaml: no `# -- description` comment for %s (document the key or a parent of it)",
			strings.Join(undocumented, ", "))
	}
	return rows, nil
}

func walk(m *yaml.Node, prefix string, rows *[]Row, undocumented *[]string) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		key := prefix + k.Value
		desc, def, ok := parseComment(k.HeadComment)
		if ok {
			if def == "" {
				def = "`" + flow(v) + "`"
				if v.Kind == yaml.ScalarNode && strings.Contains(v.Value, "\n") {
					def = "see values.yaml"
				}
			}
			*rows = append(*rows, Row{Key: "`" + key + "`", Default: def, Description: desc})
			continue
		}
		if v.Kind == yaml.MappingNode && len(v.Content) > 0 {
			walk(v, key+".", rows, undocumented)
			continue
		}
		*undocumented = append(*undocumented, key)
	}
}

// parseComment finds the `-- ` description in a key's head comment (free text may come before it) and an
// `@default -- ` override.
func parseComment(c string) (desc, def string, ok bool) {
	var lines []string
	for _, l := range strings.Split(c, "\n") {
		l = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "#"))
		switch {
		case strings.HasPrefix(l, "@default -- "):
			def = strings.TrimPrefix(l, "@default -- ")
		case strings.HasPrefix(l, "-- "):
			ok = true
			lines = []string{strings.TrimPrefix(l, "-- ")}
		case ok && l != "":
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, " "), def, ok
}

// flow writes a value on one line, as YAML's flow style would: `{requests: {cpu: 10m}}`, `[]`, `""`.
func flow(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		parts := make([]string, 0, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			parts = append(parts, n.Content[i].Value+": "+flow(n.Content[i+1]))
		}
		return "{" + strings.Join(parts, ", ") + "}"
	case yaml.SequenceNode:
		parts := make([]string, 0, len(n.Content))
		for _, c := range n.Content {
			parts = append(parts, flow(c))
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case yaml.AliasNode:
		return flow(n.Alias)
	}
	if n.Value == "" && n.Tag == "!!str" {
		return `""`
	}
	if n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0 {
		return `"` + n.Value + `"`
	}
	return n.Value
}

// Table renders rows as a Markdown table.
func Table(rows []Row) string {
	var b strings.Builder
	b.WriteString("| value | default | |\n|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", cell(r.Key), cell(r.Default), cell(r.Description))
	}
	return b.String()
}

// cell escapes the pipe, the one character that would end a table cell.
func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// Replace returns doc with the text between `<!-- BEGIN name ... -->` and `<!-- END name -->` (each a line of its
// own) replaced by content.
func Replace(doc, name, content string) (string, error) {
	begin, end := "<!-- BEGIN "+name, "<!-- END "+name+" -->"
	i := strings.Index(doc, begin)
	if i < 0 {
		return "", fmt.Errorf("no %q marker", begin+" -->")
	}
	nl := strings.Index(doc[i:], "-->\n")
	if nl < 0 {
		return "", fmt.Errorf("marker %q does not end its line with -->", begin)
	}
	start := i + nl + len("-->\n")
	j := strings.Index(doc[start:], end)
	if j < 0 {
		return "", fmt.Errorf("no %q marker after %q", end, begin)
	}
	return doc[:start] + content + doc[start+j:], nil
}

// YAMLBlock is content as a fenced YAML code block.
func YAMLBlock(content string) string {
	if !strings.HasSuffix(content, "\n") {
		content += "\n"
	}
	return "```yaml\n" + content + "```\n"
}
