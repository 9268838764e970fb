package mk

import (
	"bufio"
	"cmp"
	"fmt"
	"go/ast"
	"go/build/constraint"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"
)

// notSelection are build tags that do not choose tests, so no recipe passes them with -tags.
var notSelection = map[string]string{
	"cgo": "set by the go command from CGO_ENABLED, never by -tags: make unit's -race needs cgo, so its cgo files run there; " +
		"the !cgo stub is what a CGO_ENABLED=0 build gets",
	"tools": "tools.go in the e2e/*build modules pins the modules their build.sh compiles; it is never built",
	"unix": "set by the go command from GOOS, never by -tags: make test runs on Linux, so its unix files run in make unit; " +
		"the !unix fallback is what a build for another system gets",
}

// TestBuildTagsRunByMakeTest: every test behind a build tag is run by `make test`. A file behind a tag compiles
// only when a `go test -tags` names it, so `make unit` never sees it, and a package no target runs with its tag
// passes in silence (issue 34: gpu-culler's integration tests). For each Test function in a file with a
// //go:build line, some `go test` line reachable from TEST_TARGETS must name its package, satisfy the line with
// its -tags, and select the test with its -run and -skip; a tagged file without tests needs the first two.
func TestBuildTagsRunByMakeTest(t *testing.T) {
	mf := readMakefiles(t, "..")
	lines := mf.goTestLines(t)
	files := taggedFiles(t, "..")
	if len(files) == 0 {
		t.Fatal("no file with a //go:build line found: is the walk rooted at the repository?")
	}
	for _, f := range files {
		if tag := exempt(f.expr); tag != "" {
			t.Logf("%s: not a test selection (%s: %s)", f.path, tag, notSelection[tag])
			continue
		}
		tests := f.tests
		if len(tests) == 0 {
			tests = []string{""} // the file must at least be compiled with its tag
		}
		for _, name := range tests {
			if !slices.ContainsFunc(lines, func(l goTest) bool { return l.runs(f, name) }) {
				what := "its package is tested"
				if name != "" {
					what = name + " runs"
				}
				t.Errorf("%s (%s): no `go test` line reachable from TEST_TARGETS = [%s] has -tags, package and -run so that %s; "+
					"add a target that runs it (like profiles-apiserver-test in mk/profiles.mk) and add it to TEST_TARGETS",
					f.path, f.expr, strings.Join(mf.testTargets, " "), what)
			}
		}
	}
}

// exempt returns the first notSelection tag expr mentions, or "".
func exempt(expr constraint.Expr) string {
	switch e := expr.(type) {
	case *constraint.TagExpr:
		if _, ok := notSelection[e.Tag]; ok {
			return e.Tag
		}
	case *constraint.NotExpr:
		return exempt(e.X)
	case *constraint.AndExpr:
		return cmp.Or(exempt(e.X), exempt(e.Y))
	case *constraint.OrExpr:
		return cmp.Or(exempt(e.X), exempt(e.Y))
	}
	return ""
}

type taggedFile struct {
	path  string // slash-separated, from the repository root
	pkg   string // its directory
	expr  constraint.Expr
	tests []string // top-level Test functions (not TestMain)
}

// taggedFiles lists the .go files with a //go:build line, skipping what the go command skips (testdata, _x, .x)
// and node_modules.
func taggedFiles(t *testing.T, root string) []taggedFile {
	t.Helper()
	var out []taggedFile
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (name == "testdata" || name == "node_modules" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") {
			return nil
		}
		fset := token.NewFileSet()
		file, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		var expr constraint.Expr
		for _, group := range file.Comments {
			if group.Pos() > file.Package {
				break
			}
			for _, c := range group.List {
				if constraint.IsGoBuild(c.Text) {
					if expr, err = constraint.Parse(c.Text); err != nil {
						return fmt.Errorf("%s: %w", path, err)
					}
				}
			}
		}
		if expr == nil {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		f := taggedFile{path: filepath.ToSlash(rel), pkg: filepath.ToSlash(filepath.Dir(rel)), expr: expr}
		if strings.HasSuffix(name, "_test.go") {
			for _, decl := range file.Decls {
				if fn, ok := decl.(*ast.FuncDecl); ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Test") && fn.Name.Name != "TestMain" {
					f.tests = append(f.tests, fn.Name.Name)
				}
			}
		}
		out = append(out, f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// goTest is one `go test` command of a recipe.
type goTest struct {
	Target string
	Tags   []string
	Run    string
	Skip   string
	Pkgs   []string // as written: ./x, ./x/..., ./...
}

// runs reports whether the command runs test name of f ("": compiles f's package with f's tags).
func (l goTest) runs(f taggedFile, name string) bool {
	if !slices.ContainsFunc(l.Pkgs, func(p string) bool { return matchPkg(p, f.pkg) }) {
		return false
	}
	if !f.expr.Eval(func(tag string) bool {
		return slices.Contains(l.Tags, tag) || tag == runtime.GOOS || tag == runtime.GOARCH || strings.HasPrefix(tag, "go1.")
	}) {
		return false
	}
	if name == "" {
		return true
	}
	return matchTop(l.Run, name, true) && !matchTop(l.Skip, name, false)
}

// matchPkg reports whether package pattern p (relative, as a recipe writes it) names directory dir.
func matchPkg(p, dir string) bool {
	p = strings.TrimSuffix(strings.TrimPrefix(p, "./"), "/")
	if p == "..." || (p == "." && dir == ".") {
		return true
	}
	if base, ok := strings.CutSuffix(p, "/..."); ok {
		return dir == base || strings.HasPrefix(dir, base+"/")
	}
	return dir == p
}

// matchTop applies the top-level element of a -run or -skip pattern to a top-level test name, as go test does;
// an empty pattern gives empty. A -skip with subtest elements skips no top-level test.
func matchTop(pattern, name string, empty bool) bool {
	if pattern == "" {
		return empty
	}
	elems := strings.Split(pattern, "/")
	if !empty && len(elems) > 1 {
		return false
	}
	return regexp.MustCompile(elems[0]).MatchString(name)
}

type rule struct {
	prereqs []string
	recipe  []string
}

type makefiles struct {
	vars        map[string]string
	defines     map[string][]string
	rules       map[string]*rule
	testTargets []string
}

var (
	assignRE = regexp.MustCompile(`^(?:export\s+|override\s+)?([A-Za-z0-9_]+)\s*(\?=|::=|:=|\+=|=)\s*(.*)$`)
	ruleRE   = regexp.MustCompile(`^([^:#=\s][^:#=]*?):(?:\s+(.*))?$`)
	varRE    = regexp.MustCompile(`\$\$|\$\(([A-Za-z0-9_]+)\)|\$\{([A-Za-z0-9_]+)\}`)
	goTestRE = regexp.MustCompile(`(?:^|[\s;&|(])go test\s`)
	makeRE   = regexp.MustCompile(`\$\(MAKE\)((?:\s+[^\s;&|]+)+)`)
	callRE   = regexp.MustCompile(`\$\(call ([A-Za-z0-9_.-]+)`)
)

// readMakefiles reads root's Makefile and mk/*.mk in the order the Makefile includes them: variables (their
// defaults: ?= as if nothing overrides it), define blocks, rules and their recipes, TEST_TARGETS. Enough make for
// these files (no conditionals, no pattern rules), not make.
func readMakefiles(t *testing.T, root string) *makefiles {
	t.Helper()
	mk, err := filepath.Glob(filepath.Join(root, "mk", "*.mk"))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(mk)
	mf := &makefiles{vars: map[string]string{}, defines: map[string][]string{}, rules: map[string]*rule{}}
	top, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	// The mk files are read where the Makefile includes them: the rules after the include use their variables.
	before, after, ok := strings.Cut(string(top), "\ninclude $(sort $(wildcard mk/*.mk))\n")
	if !ok {
		t.Fatal("the Makefile does not include mk/*.mk as `include $(sort $(wildcard mk/*.mk))`")
	}
	mf.parse(before)
	for _, path := range mk {
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		mf.parse(string(src))
	}
	mf.parse(after)
	mf.testTargets = strings.Fields(mf.expand(mf.vars["TEST_TARGETS"]))
	if !slices.Contains(mf.testTargets, "unit") {
		t.Fatalf("TEST_TARGETS = %v: no unit; is the Makefile read right?", mf.testTargets)
	}
	return mf
}

func (mf *makefiles) parse(src string) {
	var (
		current []*rule
		define  string
		sc      = bufio.NewScanner(strings.NewReader(src))
		pending string
	)
	for sc.Scan() {
		line := sc.Text()
		if pending != "" {
			line = pending + " " + strings.TrimLeft(line, " \t")
			pending = ""
		}
		if body, ok := strings.CutSuffix(line, `\`); ok {
			pending = body
			continue
		}
		switch {
		case define != "":
			if strings.TrimSpace(line) == "endef" {
				define = ""
			} else {
				mf.defines[define] = append(mf.defines[define], strings.TrimLeft(line, "\t"))
			}
		case strings.HasPrefix(line, "define "):
			define = strings.TrimSpace(strings.TrimPrefix(line, "define "))
		case strings.HasPrefix(line, "\t"):
			cmd := strings.TrimLeft(strings.TrimPrefix(line, "\t"), "@-+ ")
			if strings.HasPrefix(cmd, "#") {
				continue
			}
			for _, r := range current {
				r.recipe = append(r.recipe, cmd)
			}
		case strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#"):
		case assignRE.MatchString(line):
			m := assignRE.FindStringSubmatch(line)
			name, op, value := m[1], m[2], m[3]
			switch _, set := mf.vars[name]; {
			case op == "+=" && set:
				mf.vars[name] += " " + value
			case op == "?=" && set:
			default:
				mf.vars[name] = value
			}
			current = nil
		case ruleRE.MatchString(line):
			m := ruleRE.FindStringSubmatch(line)
			prereqs, _, _ := strings.Cut(m[2], "#")
			current = nil
			for _, target := range strings.Fields(mf.expand(m[1])) {
				if strings.HasPrefix(target, ".") {
					continue
				}
				r := mf.rules[target]
				if r == nil {
					r = &rule{}
					mf.rules[target] = r
				}
				r.prereqs = append(r.prereqs, strings.Fields(mf.expand(prereqs))...)
				current = append(current, r)
			}
		default:
			current = nil
		}
	}
}

// expand replaces $(NAME) and ${NAME} of known variables (until none is left) and $$ by $; anything else
// (functions, $(CURDIR), the shell's $(...)) stays as written.
func (mf *makefiles) expand(s string) string {
	for range 20 {
		next := varRE.ReplaceAllStringFunc(s, func(m string) string {
			sub := varRE.FindStringSubmatch(m)
			if v, ok := mf.vars[sub[1]+sub[2]]; ok && m != "$$" {
				return v
			}
			return m
		})
		if next == s {
			break
		}
		s = next
	}
	return strings.ReplaceAll(s, "$$", "$")
}

// reachable returns every rule reached from roots (roots included, in visit order) through prerequisites,
// $(MAKE) target in a recipe and $(call define) in a recipe.
func (mf *makefiles) reachable(roots []string) []string {
	var out []string
	seen := map[string]bool{}
	queue := slices.Clone(roots)
	for len(queue) > 0 {
		target := queue[0]
		queue = queue[1:]
		if seen[target] {
			continue
		}
		seen[target] = true
		r := mf.rules[target]
		if r == nil {
			continue
		}
		out = append(out, target)
		queue = append(queue, r.prereqs...)
		for _, cmd := range mf.recipe(target) {
			for _, m := range makeRE.FindAllStringSubmatch(cmd, -1) {
				for _, arg := range strings.Fields(m[1]) {
					if _, ok := mf.rules[arg]; ok {
						queue = append(queue, arg)
					}
				}
			}
		}
	}
	return out
}

// recipe is target's recipe with the lines of each $(call define) it uses appended.
func (mf *makefiles) recipe(target string) []string {
	recipe := slices.Clone(mf.rules[target].recipe)
	for i := 0; i < len(recipe); i++ {
		for _, m := range callRE.FindAllStringSubmatch(recipe[i], -1) {
			recipe = append(recipe, mf.defines[m[1]]...)
		}
	}
	return recipe
}

// goTestLines returns the `go test` commands of every target reachable from TEST_TARGETS. A command inside
// $(if ...) is left out: it runs only on request.
func (mf *makefiles) goTestLines(t *testing.T) []goTest {
	t.Helper()
	for _, target := range mf.testTargets {
		if mf.rules[target] == nil {
			t.Errorf("TEST_TARGETS names %q, which no rule defines", target)
		}
	}
	var out []goTest
	for _, target := range mf.reachable(mf.testTargets) {
		for _, cmd := range mf.recipe(target) {
			if strings.Contains(cmd, "$(if ") {
				continue
			}
			for _, l := range parseGoTests(mf.expand(cmd)) {
				l.Target = target
				out = append(out, l)
			}
		}
	}
	return out
}

// goTestValueFlags take the next word as their value (unless written -flag=value).
var goTestValueFlags = map[string]bool{
	"-bench": true, "-benchtime": true, "-blockprofile": true, "-C": true, "-count": true, "-coverpkg": true,
	"-covermode": true, "-coverprofile": true, "-cpu": true, "-cpuprofile": true, "-exec": true, "-fuzz": true,
	"-fuzztime": true, "-gcflags": true, "-ldflags": true, "-list": true, "-memprofile": true, "-mod": true,
	"-o": true, "-outputdir": true, "-p": true, "-parallel": true, "-run": true, "-shuffle": true, "-skip": true,
	"-tags": true, "-timeout": true, "-trace": true, "-vet": true,
}

// parseGoTests reads the `go test` commands of one expanded recipe line: flags up to -args or the end of the
// shell command, packages as ./x, ./x/... or ./... (go test -c counts as a run: the recipe runs what it builds).
func parseGoTests(cmd string) []goTest {
	var out []goTest
	for _, loc := range goTestRE.FindAllStringIndex(cmd, -1) {
		var l goTest
		words := strings.Fields(cmd[loc[1]:])
	words:
		for i := 0; i < len(words); i++ {
			w := strings.Trim(words[i], `'"`)
			switch {
			case w == "|" || w == "||" || w == "&&" || w == ";" || w == "-args" || strings.HasPrefix(w, ";"):
				break words
			case strings.HasPrefix(w, "-"):
				name, value, ok := strings.Cut(strings.TrimPrefix(w, "-"), "=")
				name = "-" + strings.TrimPrefix(name, "-")
				if !ok && goTestValueFlags[name] && i+1 < len(words) {
					i++
					value = strings.Trim(words[i], `'"`)
				}
				switch name {
				case "-tags":
					l.Tags = strings.Split(value, ",")
				case "-run":
					l.Run = value
				case "-skip":
					l.Skip = value
				}
			case w == "." || strings.HasPrefix(w, "./"):
				l.Pkgs = append(l.Pkgs, strings.TrimRight(w, ";"))
			}
			if strings.HasSuffix(words[i], ";") {
				break
			}
		}
		out = append(out, l)
	}
	return out
}

func TestParseGoTests(t *testing.T) {
	for name, tc := range map[string]struct {
		cmd  string
		want []goTest
	}{
		"tags and packages": {
			cmd:  `GPUHUB_KUBE_BIN="/k" go test -race -count=1 -tags integration ./a/ ./b/... 2>&1 | awk '{ print }'`,
			want: []goTest{{Tags: []string{"integration"}, Pkgs: []string{"./a/", "./b/..."}}},
		},
		"run and skip, quoted, with =": {
			cmd:  `go test -tags=chart,images -run 'TestA|TestB' -skip=TestC -v ./chart/...`,
			want: []goTest{{Tags: []string{"chart", "images"}, Run: "TestA|TestB", Skip: "TestC", Pkgs: []string{"./chart/..."}}},
		},
		"-o value is not a package": {
			cmd:  `go test -c -race -tags realnode -o ./bin/realnode.test ./e2e/realnode/`,
			want: []goTest{{Tags: []string{"realnode"}, Pkgs: []string{"./e2e/realnode/"}}},
		},
		"stops at the shell command's end and at -args": {
			cmd:  `go test -tags integration ./x/... || exit 1; go test ./y -args -update ./z`,
			want: []goTest{{Tags: []string{"integration"}, Pkgs: []string{"./x/..."}}, {Pkgs: []string{"./y"}}},
		},
		"not go test": {
			cmd: `echo "rewrite it with go vet ./x"; go build -o bin/ ./services/x`,
		},
	} {
		t.Run(name, func(t *testing.T) {
			if diff := gocmp.Diff(tc.want, parseGoTests(tc.cmd)); diff != "" {
				t.Errorf("parseGoTests(%q) (-want +got):\n%s", tc.cmd, diff)
			}
		})
	}
}

func TestGoTestRuns(t *testing.T) {
	integration, _ := constraint.Parse("//go:build integration")
	f := taggedFile{pkg: "services/x/internal/y", expr: integration}
	for name, tc := range map[string]struct {
		line goTest
		test string
		want bool
	}{
		"package and tag":          {line: goTest{Tags: []string{"integration"}, Pkgs: []string{"./services/x/internal/y/"}}, test: "TestA", want: true},
		"recursive pattern":        {line: goTest{Tags: []string{"integration"}, Pkgs: []string{"./services/x/..."}}, test: "TestA", want: true},
		"./... without the tag":    {line: goTest{Pkgs: []string{"./..."}}, test: "TestA"},
		"another package":          {line: goTest{Tags: []string{"integration"}, Pkgs: []string{"./services/x/internal/yy"}}, test: "TestA"},
		"-run leaves it out":       {line: goTest{Tags: []string{"integration"}, Run: "Test(Postgres|Record)", Pkgs: []string{"./services/x/..."}}, test: "TestA"},
		"-run selects it":          {line: goTest{Tags: []string{"integration"}, Run: "^TestA$", Pkgs: []string{"./services/x/..."}}, test: "TestA", want: true},
		"-skip leaves it out":      {line: goTest{Tags: []string{"integration"}, Skip: "TestA", Pkgs: []string{"./services/x/..."}}, test: "TestA"},
		"-skip of subtests only":   {line: goTest{Tags: []string{"integration"}, Skip: "TestA/slow", Pkgs: []string{"./services/x/..."}}, test: "TestA", want: true},
		"file without tests, -run": {line: goTest{Tags: []string{"integration"}, Run: "^$", Pkgs: []string{"./services/x/..."}}, want: true},
	} {
		t.Run(name, func(t *testing.T) {
			if got := tc.line.runs(f, tc.test); got != tc.want {
				t.Errorf("%+v runs %q = %v, want %v", tc.line, tc.test, got, tc.want)
			}
		})
	}
}
