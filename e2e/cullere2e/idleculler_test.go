//go:build e2e

package cullere2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpuhub/gpuhub/e2e/cluster/proc"
	"github.com/gpuhub/gpuhub/e2e/cluster/stack"
	"github.com/gpuhub/gpuhub/e2e/gpuhubstack"
	"github.com/gpuhub/gpuhub/e2e/internal/hubproc"
)

// idleCullerScopes are jupyterhub-idle-culler's documented scopes without delete:servers: it reads and decides as
// in production, and the Hub refuses its stops (tap_test.go records them as its verdicts).
var idleCullerScopes = []string{"list:users", "read:users:activity", "read:servers"}

// idleCuller is one version of jupyterhub-idle-culler, run as z2jh runs it (a Hub service with its own token),
// unmodified, from its own venv.
type idleCuller struct {
	version string
	venv    string
	token   string
	tap     *tap
	proc    *proc.Process
}

func newIdleCuller(ctx context.Context, venv string) (*idleCuller, error) {
	out, err := exec.CommandContext(ctx, filepath.Join(venv, "bin", "python"), "-c",
		"import importlib.metadata as m; print(m.version('jupyterhub-idle-culler'))").Output()
	if err != nil {
		return nil, fmt.Errorf("jupyterhub-idle-culler in %s: %w (make venv-idleculler builds it)", venv, err)
	}
	ic := &idleCuller{version: strings.TrimSpace(string(out)), venv: venv, token: gpuhubstack.NewToken()}
	if ic.tap, err = newTap(ctx, ic.name()); err != nil {
		return nil, err
	}
	return ic, nil
}

// name is its Hub service name: idle-culler-1-4-0.
func (ic *idleCuller) name() string {
	return "idle-culler-" + strings.NewReplacer(".", "-", "+", "-").Replace(ic.version)
}

func (ic *idleCuller) hubService() hubproc.Service {
	return hubproc.Service{Name: ic.name(), Token: ic.token, Scopes: idleCullerScopes}
}

// start runs it against the Hub through its tap and waits for its first pass.
func (ic *idleCuller) start(ctx context.Context, s *stack.Stack) error {
	hubURL, err := ic.tap.to(s.Hub.APIURL())
	if err != nil {
		return err
	}
	dir := filepath.Join(s.Dir, ic.name()) // 2.x reads idle_culler_config.py from its working directory: none here
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	spec := proc.Spec{
		Name: ic.name(),
		Path: filepath.Join(ic.venv, "bin", "python"),
		Args: []string{"-m", "jupyterhub_idle_culler", "--url=" + hubURL,
			"--timeout=" + strconv.Itoa(int(idleTimeout.Seconds())), "--cull-every=" + strconv.Itoa(int(idleEvery.Seconds())),
			"--concurrency=10"},
		Env:     []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8", "JUPYTERHUB_API_URL=" + hubURL, "JUPYTERHUB_API_TOKEN=" + ic.token},
		Dir:     dir,
		LogFile: filepath.Join(s.Dir, "logs", ic.name()+".log"),
	}
	if ic.proc, err = proc.Start(ctx, s.Opts.Logger, spec); err != nil {
		return fmt.Errorf("jupyterhub-idle-culler %s: %w", ic.version, err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		for _, c := range ic.tap.log() {
			if c.isPass() && c.Status == 200 {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("jupyterhub-idle-culler %s made no pass over the Hub's users: %w; see %s", ic.version, err, spec.LogFile)
	}
	return nil
}

func (ic *idleCuller) stop() {
	if ic.proc != nil {
		ic.proc.Stop()
	}
}
