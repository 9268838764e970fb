//go:build chart

package chart

import (
	"encoding/json"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"gopkg.in/yaml.v3"
)

const (
	rulesFile     = "gpuhub/files/prometheus-rules.yaml"
	dashboardFile = "gpuhub/files/grafana-dashboard.json"
)

// metricRefs finds the series names a PromQL expression selects: identifiers with a colon (recording rules) or
// the gpuhub_ prefix, outside label matchers and strings. A light stand-in for promql/parser, which would pull
// Prometheus into go.mod; every series here starts with gpuhub_ or is a recording rule.
var (
	quotedRE   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	matchersRE = regexp.MustCompile(`\{[^}]*\}`)
	metricRE   = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
)

func metricRefs(expr string) []string {
	expr = matchersRE.ReplaceAllString(quotedRE.ReplaceAllString(expr, `""`), "")
	var names []string
	for _, name := range metricRE.FindAllString(expr, -1) {
		if (strings.HasPrefix(name, "gpuhub_") || strings.Contains(name, ":")) && !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	return names
}

func TestMonitoringMetricRefs(t *testing.T) {
	tests := map[string]struct {
		expr string
		want []string
	}{
		"selector with matchers": {`sum by (user) (gpuhub_usage_user_used_gpus{user=~"$user", job="gpuhub_x"})`, []string{"gpuhub_usage_user_used_gpus"}},
		"recording rule and range": {`user:gpuhub_usage_idle_held_gpu_hours:increase1h > 0 and rate(gpuhub_culler_passes_total[5m])`,
			[]string{"user:gpuhub_usage_idle_held_gpu_hours:increase1h", "gpuhub_culler_passes_total"}},
		"functions and labels are not metrics": {`label_values(gpuhub_quota_waitlist_length, class)`, []string{"gpuhub_quota_waitlist_length"}},
		"repeated":                             {`gpuhub_usage_ledger_up == 0 or gpuhub_usage_ledger_up`, []string{"gpuhub_usage_ledger_up"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, metricRefs(tc.expr)); diff != "" {
				t.Errorf("metricRefs(%q) (-want +got):\n%s", tc.expr, diff)
			}
		})
	}
}

// exportedMetrics reads the metric definitions in the services' Go sources (every non-test file under
// services/ and hubapi/): prometheus.*Opts literals and prometheus.BuildFQName, directly or through a helper
// such as desc(name, help, labels...). A part that is not a constant (a shared package's Subsystem option) may
// be any subsystem some caller passes as a literal; a Name built at run time (name + "_reloads_total") any word.
type exportedMetrics struct {
	patterns []*regexp.Regexp
}

func (e exportedMetrics) has(name string) bool {
	for _, candidate := range []string{name, strings.TrimSuffix(name, "_bucket"), strings.TrimSuffix(name, "_count"), strings.TrimSuffix(name, "_sum")} {
		for _, re := range e.patterns {
			if re.MatchString(candidate) {
				return true
			}
		}
	}
	return false
}

type goPackage struct {
	files  []*ast.File
	consts map[string][]string // every string constant by name, function-local ones included
}

func readExportedMetrics(t *testing.T) exportedMetrics {
	t.Helper()
	pkgs := map[string]*goPackage{}
	fset := token.NewFileSet()
	for _, root := range []string{"../services", "../hubapi"} {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			// Benchmark harnesses register stand-in services (subsystem "naive"); they are not deployed.
			if strings.Contains(path, "/bench/") || strings.Contains(path, "/benchkit/") {
				return nil
			}
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			dir := filepath.Dir(path)
			if pkgs[dir] == nil {
				pkgs[dir] = &goPackage{consts: map[string][]string{}}
			}
			pkgs[dir].files = append(pkgs[dir].files, f)
			return nil
		})
		if err != nil {
			t.Fatalf("read Go sources under %s: %v", root, err)
		}
	}

	subsystems := map[string]bool{}
	for _, p := range pkgs {
		for _, f := range p.files {
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.ValueSpec:
					for i, name := range n.Names {
						if i < len(n.Values) {
							if s, ok := stringLit(n.Values[i]); ok {
								p.consts[name.Name] = append(p.consts[name.Name], s)
							}
						}
					}
				case *ast.KeyValueExpr:
					if key, ok := n.Key.(*ast.Ident); ok && (key.Name == "Subsystem" || key.Name == "MetricsSubsystem") {
						if s, ok := stringLit(n.Value); ok {
							subsystems[s] = true
						}
					}
				}
				return true
			})
		}
	}
	anySubsystem := `(?:` + strings.Join(sortedKeys(subsystems), "|") + `)`

	// part turns an expression for a name part into a regexp: a literal or a constant of the package, else
	// what it may be at run time.
	part := func(p *goPackage, e ast.Expr, unknown string) string {
		if s, ok := stringLit(e); ok {
			return regexp.QuoteMeta(s)
		}
		if id, ok := e.(*ast.Ident); ok && len(p.consts[id.Name]) > 0 {
			var alts []string
			for _, v := range p.consts[id.Name] {
				alts = append(alts, regexp.QuoteMeta(v))
			}
			return `(?:` + strings.Join(alts, "|") + `)`
		}
		if b, ok := e.(*ast.BinaryExpr); ok && b.Op == token.ADD {
			return `[a-z_]+`
		}
		return unknown
	}
	var e exportedMetrics
	add := func(ns, sub, name string) {
		e.patterns = append(e.patterns, regexp.MustCompile(`^`+ns+`_`+sub+`_`+name+`$`))
	}
	nameParts := func(p *goPackage, ns, sub, name ast.Expr) {
		nsRE, subRE := part(p, ns, `gpuhub`), part(p, sub, anySubsystem)
		if b, ok := name.(*ast.BinaryExpr); ok && b.Op == token.ADD {
			add(nsRE, subRE, part(p, b.X, `[a-z_]+`)+part(p, b.Y, `[a-z_]+`))
			return
		}
		add(nsRE, subRE, part(p, name, `[a-z_]+`))
	}
	for _, p := range pkgs {
		// Helpers that build a name from one of their parameters: func desc(name, help string, ...) { ...
		// BuildFQName(namespace, subsystem, name) ... }.
		type helper struct {
			ns, sub ast.Expr
			arg     int
		}
		helpers := map[string]helper{}
		for _, f := range p.files {
			for _, decl := range f.Decls {
				fn, ok := decl.(*ast.FuncDecl)
				if !ok || fn.Body == nil {
					continue
				}
				var params []string
				for _, field := range fn.Type.Params.List {
					for _, n := range field.Names {
						params = append(params, n.Name)
					}
				}
				ast.Inspect(fn.Body, func(n ast.Node) bool {
					if call, ok := n.(*ast.CallExpr); ok && isSelector(call.Fun, "prometheus", "BuildFQName") && len(call.Args) == 3 {
						if id, ok := call.Args[2].(*ast.Ident); ok {
							if i := slices.Index(params, id.Name); i >= 0 {
								helpers[fn.Name.Name] = helper{ns: call.Args[0], sub: call.Args[1], arg: i}
							}
						}
					}
					return true
				})
			}
		}
		for _, f := range p.files {
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.CompositeLit:
					sel, ok := n.Type.(*ast.SelectorExpr)
					if !ok || !isSelector(sel, "prometheus", sel.Sel.Name) || !strings.HasSuffix(sel.Sel.Name, "Opts") {
						return true
					}
					fields := map[string]ast.Expr{}
					for _, el := range n.Elts {
						if kv, ok := el.(*ast.KeyValueExpr); ok {
							if key, ok := kv.Key.(*ast.Ident); ok {
								fields[key.Name] = kv.Value
							}
						}
					}
					if fields["Name"] != nil {
						nameParts(p, fields["Namespace"], fields["Subsystem"], fields["Name"])
					}
				case *ast.CallExpr:
					if isSelector(n.Fun, "prometheus", "BuildFQName") && len(n.Args) == 3 {
						if _, ok := stringLit(n.Args[2]); ok {
							nameParts(p, n.Args[0], n.Args[1], n.Args[2])
						}
					}
					if id, ok := n.Fun.(*ast.Ident); ok {
						if h, ok := helpers[id.Name]; ok && h.arg < len(n.Args) {
							if _, ok := stringLit(n.Args[h.arg]); ok {
								nameParts(p, h.ns, h.sub, n.Args[h.arg])
							}
						}
					}
				}
				return true
			})
		}
	}
	return e
}

func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

func isSelector(e ast.Expr, pkg, name string) bool {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != name {
		return false
	}
	id, ok := sel.X.(*ast.Ident)
	return ok && id.Name == pkg
}

func sortedKeys(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// TestMonitoringExportedMetrics checks the reader of the Go sources against metrics the services' READMEs and
// /metrics goldens name, and against near misses, so that a broken reader cannot pass everything or nothing.
func TestMonitoringExportedMetrics(t *testing.T) {
	exported := readExportedMetrics(t)
	tests := map[string]bool{
		"gpuhub_usage_user_allocated_gpus":               true, // desc helper, package constants
		"gpuhub_usage_user_allocated_gpu_seconds_total":  true,
		"gpuhub_usage_ledger_up":                         true, // literals
		"gpuhub_agent_last_sample_timestamp_seconds":     true,
		"gpuhub_culler_passes_total":                     true, // function-local constants
		"gpuhub_culler_pass_duration_seconds_bucket":     true, // histogram series
		"gpuhub_quota_decisions_total":                   true, // shared package, subsystem from the caller
		"gpuhub_quota_policy_reloads_total":              true, // name built at run time
		"gpuhub_quota_waitlist_length":                   true,
		"gpuhub_profiles_quota_assess_total":             true,
		"gpuhub_hubapi_requests_total":                   true,
		"gpuhub_usage_user_allocated_gpu":                false,
		"gpuhub_culler_stops":                            false,
		"gpuhub_quota_waitlist_len":                      false, // a typo
		"gpuhub_nosuchservice_passes_total":              false,
		"gpuhub_usage_user_allocated_gpus_total":         false,
		"gpuhub_culler_pass_duration_seconds_bucket_sum": false,
	}
	got := map[string]bool{}
	for name := range tests {
		got[name] = exported.has(name)
	}
	if diff := cmp.Diff(tests, got); diff != "" {
		t.Errorf("metrics found in the services' sources (-want +got):\n%s", diff)
	}
}

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Record string `yaml:"record"`
			Alert  string `yaml:"alert"`
			Expr   string `yaml:"expr"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// recordedNames reads the rules file and checks that its expressions use exported metrics or rules recorded
// earlier in the file; it returns the recorded names.
func recordedNames(t *testing.T, exported exportedMetrics) map[string]bool {
	t.Helper()
	raw, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.Unmarshal(raw, &rf); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	recorded := map[string]bool{}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			what := r.Record + r.Alert
			refs := metricRefs(r.Expr)
			if len(refs) == 0 {
				t.Errorf("%s: rule %s uses no gpuhub metric: %q", rulesFile, what, r.Expr)
			}
			for _, m := range refs {
				if !exported.has(m) && !recorded[m] {
					t.Errorf("%s: rule %s uses %s, which no service exports and no rule above records", rulesFile, what, m)
				}
			}
			if r.Record != "" {
				recorded[r.Record] = true
			}
		}
	}
	return recorded
}

func TestMonitoringRulesUseExportedMetrics(t *testing.T) {
	recordedNames(t, readExportedMetrics(t))
}

type dashboardPanel struct {
	ID      int              `json:"id"`
	Type    string           `json:"type"`
	Title   string           `json:"title"`
	Panels  []dashboardPanel `json:"panels"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

// TestMonitoringDashboard checks that every panel of the Grafana dashboard queries something, and that each
// metric its PromQL uses is exported by a service or recorded by the shipped rules.
func TestMonitoringDashboard(t *testing.T) {
	exported := readExportedMetrics(t)
	recorded := recordedNames(t, exported)
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		UID        string           `json:"uid"`
		Panels     []dashboardPanel `json:"panels"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if dash.UID == "" {
		t.Errorf("%s: no uid (links and provisioning need a stable one)", dashboardFile)
	}
	check := func(where, expr string) {
		refs := metricRefs(expr)
		if len(refs) == 0 {
			t.Errorf("%s: %s uses no gpuhub metric: %q", dashboardFile, where, expr)
		}
		for _, m := range refs {
			if !exported.has(m) && !recorded[m] {
				t.Errorf("%s: %s uses %s, which no service exports and %s does not record", dashboardFile, where, m, rulesFile)
			}
		}
	}
	for _, v := range dash.Templating.List {
		if v.Definition != "" {
			check("variable $"+v.Name, v.Definition)
		}
	}
	ids := map[int]string{}
	var walk func([]dashboardPanel)
	walk = func(panels []dashboardPanel) {
		for _, p := range panels {
			if other, ok := ids[p.ID]; ok {
				t.Errorf("%s: panels %q and %q share id %d", dashboardFile, other, p.Title, p.ID)
			}
			ids[p.ID] = p.Title
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			if len(p.Targets) == 0 {
				t.Errorf("%s: panel %q has no query", dashboardFile, p.Title)
			}
			for _, target := range p.Targets {
				check("panel "+strconv.Quote(p.Title), target.Expr)
			}
		}
	}
	walk(dash.Panels)
	if len(ids) == 0 {
		t.Errorf("%s: no panels", dashboardFile)
	}
}

// TestChartShipsMonitoringFiles checks that the chart ships the rules and the dashboard unchanged: the
// PrometheusRule's spec is the rules file, and the ConfigMaps hold the files byte for byte.
func TestChartShipsMonitoringFiles(t *testing.T) {
	out, err := helm(t, "template", "gpuhub", "gpuhub", "--kube-version", kubeVersion, "--show-only", "templates/monitoring.yaml",
		"--set", "monitoring.prometheusRule.enabled=true", "--set", "monitoring.rulesConfigMap.enabled=true",
		"--set", "monitoring.grafanaDashboard.enabled=true")
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, out)
	}
	type object struct {
		Kind     string `yaml:"kind"`
		Metadata struct {
			Name string `yaml:"name"`
		} `yaml:"metadata"`
		Spec any               `yaml:"spec"`
		Data map[string]string `yaml:"data"`
	}
	got := map[string]object{}
	dec := yaml.NewDecoder(strings.NewReader(out))
	for {
		var o object
		if err := dec.Decode(&o); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatal(err)
		}
		if o.Kind != "" {
			got[o.Kind+" "+o.Metadata.Name] = o
		}
	}
	rules, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	dashboard, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var wantSpec any
	if err := yaml.Unmarshal(rules, &wantSpec); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wantSpec, got["PrometheusRule gpuhub"].Spec); diff != "" {
		t.Errorf("PrometheusRule spec is not %s (-want +got):\n%s", rulesFile, diff)
	}
	if diff := cmp.Diff(string(rules), got["ConfigMap gpuhub-prometheus-rules"].Data["prometheus-rules.yaml"]); diff != "" {
		t.Errorf("rules ConfigMap is not %s (-want +got):\n%s", rulesFile, diff)
	}
	if diff := cmp.Diff(string(dashboard), got["ConfigMap gpuhub-grafana-dashboard"].Data["gpuhub.json"]); diff != "" {
		t.Errorf("dashboard ConfigMap is not %s (-want +got):\n%s", dashboardFile, diff)
	}
}

// TestScrapeTargets: with monitoring.serviceMonitor on, the ServiceMonitor selects exactly the release's four
// service Services (each with a port "http") and the PodMonitor the agent DaemonSet's pods (container port "http").
func TestScrapeTargets(t *testing.T) {
	out, err := helm(t, "template", "gpuhub", "gpuhub", "--namespace", "jhub", "--kube-version", kubeVersion,
		"--set", "monitoring.serviceMonitor.enabled=true", "--set", "quota.enabled=true", "--set", "profiles.enabled=true",
		"--set", "culler.enabled=true")
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, out)
	}
	type object struct {
		Kind     string `yaml:"kind"`
		Metadata struct {
			Name   string            `yaml:"name"`
			Labels map[string]string `yaml:"labels"`
		} `yaml:"metadata"`
		Spec struct {
			Selector struct {
				MatchLabels map[string]string `yaml:"matchLabels"`
			} `yaml:"selector"`
			Ports []struct {
				Name string `yaml:"name"`
			} `yaml:"ports"`
			Endpoints []struct {
				Port string `yaml:"port"`
			} `yaml:"endpoints"`
			PodMetricsEndpoints []struct {
				Port string `yaml:"port"`
			} `yaml:"podMetricsEndpoints"`
			Template struct {
				Metadata struct {
					Labels map[string]string `yaml:"labels"`
				} `yaml:"metadata"`
				Spec struct {
					Containers []struct {
						Ports []struct {
							Name string `yaml:"name"`
						} `yaml:"ports"`
					} `yaml:"containers"`
				} `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	var objs []object
	dec := yaml.NewDecoder(strings.NewReader(out))
	for {
		var o object
		if err := dec.Decode(&o); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatal(err)
		}
		if o.Kind != "" {
			objs = append(objs, o)
		}
	}
	matches := func(sel, labels map[string]string) bool {
		for k, v := range sel {
			if labels[k] != v {
				return false
			}
		}
		return len(sel) > 0
	}
	var sm, pm *object
	for i := range objs {
		switch objs[i].Kind {
		case "ServiceMonitor":
			sm = &objs[i]
		case "PodMonitor":
			pm = &objs[i]
		}
	}
	if sm == nil || pm == nil || len(sm.Spec.Endpoints) != 1 || len(pm.Spec.PodMetricsEndpoints) != 1 {
		t.Fatalf("want one ServiceMonitor and one PodMonitor with one endpoint each:\n%s", out)
	}
	var selected []string
	for _, o := range objs {
		switch {
		case o.Kind == "Service" && matches(sm.Spec.Selector.MatchLabels, o.Metadata.Labels):
			selected = append(selected, o.Metadata.Name)
			if !slices.ContainsFunc(o.Spec.Ports, func(p struct {
				Name string `yaml:"name"`
			}) bool {
				return p.Name == sm.Spec.Endpoints[0].Port
			}) {
				t.Errorf("Service %s has no port %q", o.Metadata.Name, sm.Spec.Endpoints[0].Port)
			}
		case o.Kind == "DaemonSet":
			if !matches(pm.Spec.Selector.MatchLabels, o.Spec.Template.Metadata.Labels) {
				t.Errorf("the PodMonitor's selector %v does not select the agent pods %v", pm.Spec.Selector.MatchLabels, o.Spec.Template.Metadata.Labels)
			}
			if c := o.Spec.Template.Spec.Containers; len(c) == 0 || len(c[0].Ports) == 0 || c[0].Ports[0].Name != pm.Spec.PodMetricsEndpoints[0].Port {
				t.Errorf("the agent container has no port %q", pm.Spec.PodMetricsEndpoints[0].Port)
			}
		}
	}
	slices.Sort(selected)
	if diff := cmp.Diff([]string{"gpuhub-culler", "gpuhub-profiles", "gpuhub-quota", "gpuhub-usage"}, selected); diff != "" {
		t.Errorf("Services the ServiceMonitor selects (-want +got):\n%s", diff)
	}
}
