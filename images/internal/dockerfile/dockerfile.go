// Package dockerfile parses the part of the Dockerfile language that images/*.Dockerfile use, so that the
// images built here without Docker follow the same recipe and a test can compare the two.
//
// Supported: parser directives and comments, line continuations, global and stage ARG, FROM [AS], COPY with
// --from/--chown/--chmod, RUN (shell form, with --mount), USER, ENTRYPOINT, CMD (exec and shell form), EXPOSE, ENV, WORKDIR,
// LABEL. Anything else is an error naming its line, never silently ignored.
package dockerfile

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
)

// File is a parsed Dockerfile.
type File struct {
	Path   string
	Stages []*Stage
	// BuildTag is the reference the file's `docker build ... -t REF .` comment names.
	BuildTag string
}

// Stage is one FROM and what follows it.
type Stage struct {
	Name         string // the AS name, or its index
	From         string // with global ARGs substituted
	Instructions []Instruction
}

// Instruction is one instruction with variables substituted.
type Instruction struct {
	Line  int
	Cmd   string            // upper case: COPY, RUN, ...
	Flags map[string]string // --from=build → from: build
	// Mounts are RUN's --mount values in order (type=cache,target=/x,...), variables substituted.
	Mounts []string
	// Env is, for RUN, the stage's ARG and ENV values in effect (KEY=value, sorted): RUN's command is left
	// as written and its shell expands variables from this environment, as in Docker.
	Env  []string
	Args []string // exec form (JSON) or words; RUN keeps one element, its shell command
	JSON bool     // exec form
}

// Final is the last stage: what the image is.
func (f *File) Final() *Stage { return f.Stages[len(f.Stages)-1] }

// Stage returns the stage named name (its AS name or index), or nil.
func (f *File) Stage(name string) *Stage {
	for _, s := range f.Stages {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// ParseFile reads and parses path.
func ParseFile(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	f, err := Parse(string(data))
	if err != nil {
		return nil, fmt.Errorf("%s:%w", path, err)
	}
	f.Path = path
	return f, nil
}

// Parse parses a Dockerfile's text. Errors start with the line number.
func Parse(text string) (*File, error) {
	f := &File{}
	globals := map[string]string{}
	var stage *Stage
	var stageVars map[string]string
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		lineNo := i + 1
		line := strings.TrimSpace(lines[i])
		if strings.HasPrefix(line, "#") {
			if ref, ok := buildTag(line); ok && f.BuildTag == "" {
				f.BuildTag = ref
			}
			continue
		}
		if line == "" {
			continue
		}
		// Continuations: a trailing backslash joins the next line; comment lines inside are dropped.
		for strings.HasSuffix(line, `\`) && i+1 < len(lines) {
			line = strings.TrimSuffix(line, `\`)
			i++
			next := strings.TrimSpace(lines[i])
			if strings.HasPrefix(next, "#") {
				line += `\`
				continue
			}
			line += " " + next
		}
		cmd, rest, _ := strings.Cut(line, " ")
		cmd = strings.ToUpper(cmd)
		rest = strings.TrimSpace(rest)
		vars := globals
		if stage != nil {
			vars = stageVars
		}
		switch cmd {
		case "ARG":
			for _, kv := range words(rest) {
				k, v, _ := strings.Cut(kv, "=")
				if stage == nil {
					globals[k] = expand(v, globals)
					continue
				}
				if _, ok := stageVars[k]; !ok || v != "" {
					stageVars[k] = expand(v, stageVars)
				}
				if v == "" {
					// A stage ARG without a default brings in the global of that name.
					if g, ok := globals[k]; ok {
						stageVars[k] = g
					}
				}
			}
			continue
		case "FROM":
			w := words(rest)
			if len(w) != 1 && (len(w) != 3 || !strings.EqualFold(w[1], "AS")) {
				return nil, fmt.Errorf("%d: FROM %s: want IMAGE [AS NAME]", lineNo, rest)
			}
			stage = &Stage{Name: fmt.Sprint(len(f.Stages)), From: expand(w[0], globals)}
			if len(w) == 3 {
				stage.Name = w[2]
			}
			stageVars = map[string]string{}
			f.Stages = append(f.Stages, stage)
			continue
		}
		if stage == nil {
			return nil, fmt.Errorf("%d: %s before the first FROM", lineNo, cmd)
		}
		in := Instruction{Line: lineNo, Cmd: cmd, Flags: map[string]string{}}
		for strings.HasPrefix(rest, "--") {
			flag, after, _ := strings.Cut(rest, " ")
			k, v, _ := strings.Cut(strings.TrimPrefix(flag, "--"), "=")
			if cmd == "RUN" && k == "mount" {
				in.Mounts = append(in.Mounts, expand(v, vars))
			} else {
				in.Flags[k] = expand(v, vars)
			}
			rest = strings.TrimSpace(after)
		}
		switch cmd {
		case "RUN":
			if len(in.Flags) > 0 {
				return nil, fmt.Errorf("%d: RUN flags %v are not supported", lineNo, in.Flags)
			}
			in.Args = []string{rest}
			for k, v := range stageVars {
				in.Env = append(in.Env, k+"="+v)
			}
			sort.Strings(in.Env)
		case "ENTRYPOINT", "CMD":
			if strings.HasPrefix(rest, "[") {
				if err := json.Unmarshal([]byte(rest), &in.Args); err != nil {
					return nil, fmt.Errorf("%d: %s: %w", lineNo, cmd, err)
				}
				in.JSON = true
			} else {
				in.Args = []string{"/bin/sh", "-c", rest} // expanded by that shell when the container starts
			}
		case "ENV":
			w := words(rest)
			if len(w) > 0 && !strings.Contains(w[0], "=") {
				k, v, _ := strings.Cut(rest, " ")
				w = []string{k + "=" + strings.TrimSpace(v)}
			}
			for _, kv := range w {
				k, v, _ := strings.Cut(kv, "=")
				v = expand(v, vars)
				stageVars[k] = v
				in.Args = append(in.Args, k+"="+v)
			}
		case "COPY":
			for k := range in.Flags {
				if k != "from" && k != "chown" && k != "chmod" {
					return nil, fmt.Errorf("%d: COPY --%s is not supported", lineNo, k)
				}
			}
			fallthrough
		case "USER", "EXPOSE", "WORKDIR", "LABEL":
			for _, w := range words(rest) {
				in.Args = append(in.Args, expand(w, vars))
			}
			if cmd == "COPY" && len(in.Args) < 2 {
				return nil, fmt.Errorf("%d: COPY wants at least one source and a destination", lineNo)
			}
		default:
			return nil, fmt.Errorf("%d: instruction %s is not supported by the images built here", lineNo, cmd)
		}
		stage.Instructions = append(stage.Instructions, in)
	}
	if len(f.Stages) == 0 {
		return nil, fmt.Errorf("1: no FROM")
	}
	return f, nil
}

// buildTag finds REF in a comment such as "#   docker build -f images/x.Dockerfile -t REF .".
func buildTag(comment string) (string, bool) {
	w := strings.Fields(comment)
	for i := 0; i+1 < len(w); i++ {
		if w[i] == "-t" && strings.Contains(strings.Join(w[:i], " "), "docker build") {
			return w[i+1], true
		}
	}
	return "", false
}

// words splits on spaces, keeping double-quoted parts together (quotes removed).
func words(s string) []string {
	var out []string
	var cur strings.Builder
	inQuote, any := false, false
	for _, r := range s {
		switch {
		case r == '"':
			inQuote, any = !inQuote, true
		case (r == ' ' || r == '\t') && !inQuote:
			if any {
				out = append(out, cur.String())
				cur.Reset()
				any = false
			}
		default:
			cur.WriteRune(r)
			any = true
		}
	}
	if any {
		out = append(out, cur.String())
	}
	return out
}

// expand substitutes $VAR, ${VAR} and ${VAR:-default} from vars.
func expand(s string, vars map[string]string) string {
	return os.Expand(s, func(name string) string {
		if k, def, ok := strings.Cut(name, ":-"); ok {
			if v := vars[k]; v != "" {
				return v
			}
			return def
		}
		return vars[name]
	})
}
