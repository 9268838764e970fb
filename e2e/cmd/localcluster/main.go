// Command localcluster runs the local GPU cluster of `make demo`: a real control plane, emulated
// GPU nodes, JupyterHub with KubeSpawner; it prints the Hub URL and logins once ready and runs
// until interrupted, then stops everything.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gpuhub/gpuhub/e2e/cluster"
	"github.com/gpuhub/gpuhub/e2e/cluster/stack"
	"github.com/gpuhub/gpuhub/e2e/gpuhubstack"
	"github.com/gpuhub/gpuhub/e2e/hub"
)

func main() { os.Exit(run()) }

func run() int {
	opts, err := parseFlags(os.Args[1:], os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := Run(ctx, opts); err != nil {
		fmt.Fprintln(os.Stderr, "localcluster:", err)
		return 1
	}
	return 0
}

// Options configures Run.
type Options struct {
	Stack stack.Options
	// InfoFile, when set, receives a JSON document with the URL, kubeconfig and logins at ready.
	InfoFile string
	// KubeconfigOut receives a copy of the admin kubeconfig (a known path for kubectl).
	KubeconfigOut string
	// ExitWhenReady stops the cluster right after it is ready (for timing the start).
	ExitWhenReady bool
	// GPUHub runs gpuhub on the cluster (chart-rendered agents + RBAC, usage API); NoGPUHub leaves it out.
	GPUHub   gpuhubstack.Options
	NoGPUHub bool
	// NoQuota leaves gpu-quota out (GPUHub.Quota is ignored).
	NoQuota bool
	// NoWaitlist runs gpu-quota without its waitlist.
	NoWaitlist bool
	// NoProfiles leaves gpu-profiles out (GPUHub.Profiles is ignored): the form shows the static profileList.
	NoProfiles bool
	// NoCuller leaves gpu-culler out (GPUHub.Culler is ignored): no server is stopped for an idle GPU.
	NoCuller bool
	// Prometheus scrapes the services and agents (Prometheus.Binary looked up on PATH); NoPrometheus leaves it
	// out, as does a machine without it (the demo says so and goes on).
	Prometheus   gpuhubstack.PrometheusOptions
	NoPrometheus bool
	Out          io.Writer
	Logger       *slog.Logger
}

func parseFlags(args []string, getenv func(string) string) (Options, error) {
	env := func(key, def string) string {
		if v := getenv(key); v != "" {
			return v
		}
		return def
	}
	cache := env("GPUHUB_CACHE", filepath.Join(env("HOME", "/root"), ".cache", "gpuhub"))
	fs := flag.NewFlagSet("localcluster", flag.ContinueOnError)
	var o Options
	port := 0
	var logLevel string
	fs.StringVar(&o.Stack.KubeBinDir, "kube-bin", env("GPUHUB_KUBE_BIN", filepath.Join(cache, "kube", "v1.36.3", "bin")),
		"directory with kube-apiserver, kube-scheduler, kube-controller-manager (env GPUHUB_KUBE_BIN)")
	fs.StringVar(&o.Stack.Etcd, "etcd", env("GPUHUB_ETCD", ""), "etcd executable (env GPUHUB_ETCD; default: etcd on PATH)")
	fs.StringVar(&o.Stack.Topology, "topology", env("GPUHUB_TOPOLOGY", "e2e/topology.yaml"), "GPU topology file (env GPUHUB_TOPOLOGY)")
	fs.StringVar(&o.Stack.Venv, "venv", env("GPUHUB_HUB_VENV", filepath.Join(cache, "venv", "hub55")),
		"virtualenv with JupyterHub, KubeSpawner and JupyterLab (env GPUHUB_HUB_VENV)")
	fs.StringVar(&o.Stack.CHP, "chp", env("GPUHUB_CHP", filepath.Join(cache, "node", "node_modules", ".bin", "configurable-http-proxy")),
		"configurable-http-proxy executable (env GPUHUB_CHP)")
	fs.StringVar(&o.Stack.GPUAgent, "gpu-agent", env("GPUHUB_GPU_AGENT", "bin/gpu-agent"), "gpu-agent executable for gpu-agent pods (env GPUHUB_GPU_AGENT)")
	fs.StringVar(&o.Stack.Dir, "state-dir", env("GPUHUB_STATE_DIR", ""), "state directory (env GPUHUB_STATE_DIR; default: a temp dir removed at exit)")
	fs.StringVar(&o.Stack.Password, "password", env("GPUHUB_DEMO_PASSWORD", "gpuhub-demo"), "password of the demo users (env GPUHUB_DEMO_PASSWORD)")
	fs.IntVar(&port, "port", atoi(env("GPUHUB_DEMO_PORT", "8000")), "Hub port on 127.0.0.1, 0 for any free port (env GPUHUB_DEMO_PORT)")
	fs.StringVar(&o.Stack.HubExtraConfigDir, "hub-extra-config", env("GPUHUB_HUB_EXTRA_CONFIG", ""),
		"directory of *.py files run last in the Hub config, like z2jh hub.extraConfig (env GPUHUB_HUB_EXTRA_CONFIG)")
	fs.StringVar(&o.InfoFile, "info-file", env("GPUHUB_INFO_FILE", ""), "write URL, kubeconfig and logins as JSON here when ready (env GPUHUB_INFO_FILE)")
	fs.StringVar(&o.KubeconfigOut, "kubeconfig-out", env("GPUHUB_KUBECONFIG_OUT", filepath.Join(cache, "localcluster", "kubeconfig")),
		"copy of the admin kubeconfig (env GPUHUB_KUBECONFIG_OUT)")
	fs.StringVar(&o.GPUHub.Chart.Helm, "helm", env("GPUHUB_HELM", filepath.Join(cache, "bin", "helm-v3.22.0")),
		"helm executable that renders chart/gpuhub (env GPUHUB_HELM; make helm installs it)")
	fs.StringVar(&o.GPUHub.Chart.Dir, "chart", env("GPUHUB_CHART", "chart/gpuhub"), "gpuhub Helm chart directory (env GPUHUB_CHART)")
	fs.StringVar(&o.GPUHub.UsageAPI, "usage-api", env("GPUHUB_USAGE_API", "bin/usage-api"), "usage-api executable (env GPUHUB_USAGE_API)")
	fs.IntVar(&o.GPUHub.Port, "usage-port", atoi(env("GPUHUB_USAGE_PORT", "0")), "usage API port on 127.0.0.1, 0 for a free one (env GPUHUB_USAGE_PORT)")
	fs.StringVar(&o.GPUHub.Quota.Binary, "gpu-quota", env("GPUHUB_GPU_QUOTA", "bin/gpu-quota"), "gpu-quota executable (env GPUHUB_GPU_QUOTA)")
	fs.StringVar(&o.GPUHub.Quota.Policy, "quota-policy", env("GPUHUB_QUOTA_POLICY", "e2e/hub/quota-demo.yaml"),
		"gpu-quota policy file (env GPUHUB_QUOTA_POLICY; make demo QUOTA_POLICY=path)")
	fs.IntVar(&o.GPUHub.Quota.Port, "quota-port", atoi(env("GPUHUB_QUOTA_PORT", "0")), "gpu-quota port on 127.0.0.1, 0 for a free one (env GPUHUB_QUOTA_PORT)")
	fs.BoolVar(&o.NoQuota, "no-quota", false, "run gpuhub without gpu-quota (and without the Hub glue's admission check)")
	fs.BoolVar(&o.NoWaitlist, "no-waitlist", false, "run gpu-quota without its waitlist (a GPU choice with none free cannot be queued for)")
	fs.StringVar(&o.GPUHub.Quota.WaitlistHold, "waitlist-hold", env("GPUHUB_WAITLIST_HOLD", "5m"),
		"how long a freed GPU is held for the next in line (env GPUHUB_WAITLIST_HOLD)")
	fs.StringVar(&o.GPUHub.Profiles.Binary, "gpu-profiles", env("GPUHUB_GPU_PROFILES", "bin/gpu-profiles"), "gpu-profiles executable (env GPUHUB_GPU_PROFILES)")
	fs.StringVar(&o.GPUHub.Profiles.Config, "profiles-config", env("GPUHUB_PROFILES_CONFIG", "e2e/hub/profiles-demo.yaml"),
		"gpu-profiles overrides file (env GPUHUB_PROFILES_CONFIG; make demo PROFILES_CONFIG=path)")
	fs.IntVar(&o.GPUHub.Profiles.Port, "profiles-port", atoi(env("GPUHUB_PROFILES_PORT", "0")), "gpu-profiles port on 127.0.0.1, 0 for a free one (env GPUHUB_PROFILES_PORT)")
	fs.BoolVar(&o.NoProfiles, "no-profiles", false, "run gpuhub without gpu-profiles (the spawn form shows the static profileList)")
	fs.StringVar(&o.GPUHub.Culler.Binary, "gpu-culler", env("GPUHUB_GPU_CULLER", "bin/gpu-culler"), "gpu-culler executable (env GPUHUB_GPU_CULLER)")
	fs.StringVar(&o.GPUHub.Culler.Policy, "culler-policy", env("GPUHUB_CULLER_POLICY", "e2e/hub/culler-demo.yaml"),
		"gpu-culler policy file (env GPUHUB_CULLER_POLICY; make demo CULLER_POLICY=path)")
	fs.IntVar(&o.GPUHub.Culler.Port, "culler-port", atoi(env("GPUHUB_CULLER_PORT", "0")), "gpu-culler port on 127.0.0.1, 0 for a free one (env GPUHUB_CULLER_PORT)")
	fs.BoolVar(&o.NoCuller, "no-culler", false, "run gpuhub without gpu-culler (no server is stopped for an idle GPU)")
	fs.StringVar(&o.Prometheus.Binary, "prometheus", env("GPUHUB_PROMETHEUS", "prometheus"),
		"prometheus executable that scrapes the services and agents (env GPUHUB_PROMETHEUS; Debian package prometheus)")
	fs.IntVar(&o.Prometheus.Port, "prometheus-port", atoi(env("GPUHUB_PROMETHEUS_PORT", "0")),
		"Prometheus port on 127.0.0.1, 0 for a free one (env GPUHUB_PROMETHEUS_PORT)")
	fs.BoolVar(&o.NoPrometheus, "no-prometheus", false, "run gpuhub without a Prometheus")
	fs.BoolVar(&o.NoGPUHub, "no-gpuhub", false, "run the bare cluster without gpu-agents, usage API, gpu-quota, gpu-profiles and gpu-culler")
	fs.BoolVar(&o.ExitWhenReady, "exit-when-ready", false, "stop right after reaching ready (timing)")
	fs.StringVar(&logLevel, "log-level", env("GPUHUB_LOG_LEVEL", "warn"), "log level: debug, info, warn, error (env GPUHUB_LOG_LEVEL)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(logLevel)); err != nil {
		return o, fmt.Errorf("log level: %w", err)
	}
	o.Stack.ProxyPort = port
	o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	o.Out = os.Stdout
	return o, nil
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return -1
	}
	return n
}

// Info is what InfoFile holds.
type Info struct {
	HubURL string `json:"hubURL"`
	// UsageURL is the usage API through the Hub's proxy (empty with --no-gpuhub).
	UsageURL   string   `json:"usageURL,omitempty"`
	Kubeconfig string   `json:"kubeconfig"`
	Users      []string `json:"users"`
	Password   string   `json:"password"`
	StateDir   string   `json:"stateDir"`
	// AdminToken is a Hub API token with broad admin scopes, for scripts (the file is mode 0600).
	AdminToken string `json:"adminToken"`
}

// Run starts the cluster, reports readiness and blocks until ctx ends.
func Run(ctx context.Context, o Options) error {
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	o.Stack.Logger = o.Logger
	start := time.Now()
	o.Stack.Progress = func(step string, took time.Duration) {
		fmt.Fprintf(o.Out, "==> %-90s %6.1fs\n", step, took.Seconds())
	}
	if !o.NoGPUHub {
		cleanup, err := addGPUHub(&o)
		defer cleanup()
		if err != nil {
			return err
		}
	}
	fmt.Fprintf(o.Out, "==> starting the local GPU cluster (topology %s)\n", o.Stack.Topology)
	s, err := stack.Start(ctx, o.Stack)
	if err != nil {
		if errors.Is(ctx.Err(), context.Canceled) {
			return nil
		}
		return err
	}
	defer func() {
		fmt.Fprintln(o.Out, "==> stopping: gpuhub services, Hub (and its servers), node emulator (agents), control plane")
		t0 := time.Now()
		s.Stop()
		fmt.Fprintf(o.Out, "==> stopped cleanly in %.1fs\n", time.Since(t0).Seconds())
	}()
	kubeconfig := s.ControlPlane.Kubeconfig
	if o.KubeconfigOut != "" {
		if err := copyFile(kubeconfig, o.KubeconfigOut); err != nil {
			return err
		}
		kubeconfig = o.KubeconfigOut
	}
	users := append(append([]string{}, hub.Users...), hub.Admins...)
	usageURL, usageLine := "", ""
	if !o.NoGPUHub {
		usageURL = s.HubURL() + "services/" + gpuhubstack.ServiceName + "/api/v1/"
		usageLine = fmt.Sprintf("    admin view:  %sservices/%s/ (the Hub's Services menu, gpu-usage; admin sees everyone, others their own)\n",
			s.HubURL(), gpuhubstack.ServiceName)
		usageLine += fmt.Sprintf("    usage API:   %sme (through the Hub; direct: %s)\n", usageURL,
			gpuhubstack.Usage{Port: o.GPUHub.Port}.URL())
		if o.GPUHub.Quota.Binary != "" {
			usageLine += fmt.Sprintf("    gpu-quota:   policy %s (direct: %s; edit the file, it reloads)\n", o.GPUHub.Quota.Policy,
				gpuhubstack.Quota{Port: o.GPUHub.Quota.Port}.URL())
		}
		if o.GPUHub.Profiles.Binary != "" {
			usageLine += fmt.Sprintf("    gpu-profiles: overrides %s (direct: %s; edit the file, it reloads)\n", o.GPUHub.Profiles.Config,
				gpuhubstack.Profiles{Port: o.GPUHub.Profiles.Port}.URL())
		}
		if o.GPUHub.Culler.Binary != "" {
			usageLine += fmt.Sprintf("    gpu-culler:  policy %s (direct: %s; edit the file, it reloads)\n", o.GPUHub.Culler.Policy,
				gpuhubstack.Culler{Port: o.GPUHub.Culler.Port}.URL())
		}
		if !o.NoPrometheus {
			usageLine += fmt.Sprintf("    Prometheus:  %s (every service and agent, the chart's rules: %salerts)\n", o.Prometheus.URL(), o.Prometheus.URL())
		}
	}
	if o.InfoFile != "" {
		data, _ := json.MarshalIndent(Info{HubURL: s.HubURL(), UsageURL: usageURL, Kubeconfig: kubeconfig, Users: users,
			Password: o.Stack.Password, StateDir: s.Dir, AdminToken: s.Hub.AdminToken()}, "", "  ")
		if err := os.WriteFile(o.InfoFile, data, 0o600); err != nil {
			return fmt.Errorf("info file: %w", err)
		}
	}
	fmt.Fprintf(o.Out, `
==> ready in %.1fs

    JupyterHub:  %s
%s    logins:      %s (password %q)
                 groups: students = alice, bob; researchers = carol; admin is a Hub admin
    kubectl:     KUBECONFIG=%s kubectl get nodes,pods -A
    state, logs: %s

    Press Ctrl-C to stop everything.
`, time.Since(start).Seconds(), s.HubURL(), usageLine, strings.Join(users, ", "), o.Stack.Password, kubeconfig, s.Dir)
	if o.ExitWhenReady {
		return nil
	}
	<-ctx.Done()
	return nil
}

// addGPUHub adds gpuhub's processes to the stack (the usage API and, unless left out, gpu-quota, gpu-profiles and
// gpu-culler) and gives the Hub the chart's z2jh values file with the glue, as an admin does, with loopback urls
// and fresh tokens for the services that run (gpuhubstack.LocalHubValues). cleanup removes the values file it
// writes.
func addGPUHub(o *Options) (cleanup func(), err error) {
	cleanup = func() {}
	if o.GPUHub.Port == 0 {
		o.GPUHub.Port = cluster.FreePort()
	}
	if o.GPUHub.Token == "" {
		o.GPUHub.Token = gpuhubstack.NewToken()
	}
	if o.NoQuota {
		o.GPUHub.Quota = gpuhubstack.QuotaOptions{}
	} else {
		q := &o.GPUHub.Quota
		policy, err := existingFile(q.Policy, "quota policy", "--no-quota")
		if err != nil {
			return cleanup, err
		}
		if _, err := existingFile(q.Binary, "gpu-quota executable (make build)", "--no-quota"); err != nil {
			return cleanup, err
		}
		q.Policy = policy
		if q.Port == 0 {
			q.Port = cluster.FreePort()
		}
		if q.Token == "" {
			q.Token = gpuhubstack.NewToken()
		}
		q.Waitlist = !o.NoWaitlist
	}
	if o.NoProfiles {
		o.GPUHub.Profiles = gpuhubstack.ProfilesOptions{}
	} else {
		p := &o.GPUHub.Profiles
		if _, err := existingFile(p.Binary, "gpu-profiles executable (make build)", "--no-profiles"); err != nil {
			return cleanup, err
		}
		if p.Config != "" {
			config, err := existingFile(p.Config, "gpu-profiles overrides", "--no-profiles")
			if err != nil {
				return cleanup, err
			}
			p.Config = config
		}
		if p.Port == 0 {
			p.Port = cluster.FreePort()
		}
		if p.Token == "" {
			p.Token = gpuhubstack.NewToken()
		}
	}
	if o.NoCuller {
		o.GPUHub.Culler = gpuhubstack.CullerOptions{}
	} else {
		c := &o.GPUHub.Culler
		if _, err := existingFile(c.Binary, "gpu-culler executable (make build)", "--no-culler"); err != nil {
			return cleanup, err
		}
		policy, err := existingFile(c.Policy, "gpu-culler policy", "--no-culler")
		if err != nil {
			return cleanup, err
		}
		c.Policy = policy
		if c.Port == 0 {
			c.Port = cluster.FreePort()
		}
		if c.Token == "" {
			c.Token = gpuhubstack.NewToken()
		}
	}
	if o.Stack.HubValues == "" {
		local := gpuhubstack.LocalHub{Services: o.GPUHub.LocalServices(), NoWaitlist: !o.GPUHub.Quota.Waitlist}
		values, err := gpuhubstack.LocalHubValues(o.GPUHub.Chart.Dir, local)
		if err != nil {
			return cleanup, err
		}
		f, err := os.CreateTemp("", "gpuhub-hub-values-*.yaml")
		if err != nil {
			return cleanup, fmt.Errorf("hub values: %w", err)
		}
		cleanup = func() { _ = os.Remove(f.Name()) }
		_, err = f.Write(values)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return cleanup, fmt.Errorf("hub values: %w", err)
		}
		o.Stack.HubValues = f.Name()
	}
	o.Stack.Components = append(o.Stack.Components, gpuhubstack.Components(o.GPUHub)...)
	if !o.NoPrometheus {
		addPrometheus(o)
	}
	return cleanup, nil
}

// addPrometheus adds Prometheus after gpuhub's services, with the chart's rules, or says why there is none.
func addPrometheus(o *Options) {
	bin, err := gpuhubstack.LookPrometheus(o.Prometheus.Binary)
	if err != nil {
		fmt.Fprintf(o.Out, "==> %v: the demo runs without it\n", err)
		o.NoPrometheus = true
		return
	}
	o.Prometheus.Binary = bin
	if o.Prometheus.Port == 0 {
		o.Prometheus.Port = cluster.FreePort()
	}
	o.Prometheus.Rules = filepath.Join(o.GPUHub.Chart.Dir, "files", "prometheus-rules.yaml")
	o.Stack.Components = append(o.Stack.Components, gpuhubstack.PrometheusComponent(o.GPUHub, o.Prometheus))
}

// existingFile returns path made absolute when it names a file, else an error naming what and the flag that
// leaves it out.
func existingFile(path, what, without string) (string, error) {
	if st, err := os.Stat(path); err != nil || st.IsDir() {
		return "", fmt.Errorf("%s %q not found; or run with %s", what, path, without)
	}
	return filepath.Abs(path)
}

func copyFile(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("read %s: %w", src, err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("mkdir for %s: %w", dst, err)
	}
	if err := os.WriteFile(dst, data, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", dst, err)
	}
	return nil
}
