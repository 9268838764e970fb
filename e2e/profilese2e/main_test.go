//go:build e2e

// Package profilese2e runs gpu-profiles end to end (issue 11) on its own local GPU cluster: the chart's agents
// and RBAC, the usage API, gpu-quota and gpu-profiles as processes registered with a real JupyterHub 5.5 +
// KubeSpawner, the chart's Hub glue loaded as hub.extraConfig (the generated spawn form, its fallback, the
// refusal of an exhausted choice), spawns and forms through headless Chromium, Pending pods explained on the
// progress page, a second topology joining the cluster while it runs, and right-size advice (issue 38) from
// history put into the usage API's ledger before it starts: the form's mark, the panel, the admin view. Run with
// `make e2e`.
package profilese2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/gpuhub/gpuhub/e2e/cluster/stack"
	"github.com/gpuhub/gpuhub/e2e/gpuhubstack"
	"github.com/gpuhub/gpuhub/e2e/internal/suite"
	"github.com/gpuhub/gpuhub/hubapi"
)

const (
	password  = "e2e-password"
	namespace = "jhub"
)

var (
	st          *stack.Stack
	kube        kubernetes.Interface
	hubAdmin    *hubapi.Client
	profilesURL string
	usageURL    string // the usage API's api/v1/ on loopback
	configPath  string // gpu-profiles' overrides; tests may rewrite it (re-read within 2 s)
	// readerToken is the usage API's Hub token: one of gpu-profiles' --reader-services (reads the inventory).
	readerToken string
	// profilesToken is gpu-profiles' own Hub token: what the glue presents at api/v1/profiles. The usage API
	// lists gpu-profiles in its --advice-readers: any user's right-size advice, nothing else of other users.
	profilesToken string
	// quotaToken is gpu-quota's own Hub token: one of the usage API's --reader-services (reads everyone's
	// right-size savings).
	quotaToken string
)

// policy lets researchers (carol) take both H100s and students (alice, bob) one GPU of any kind, so that what
// the form disables for bob is what is free, not his quota.
const policy = `onUnavailable: open
default:
  maxGPUs: 1
  maxServers: 2
groups:
  students:
    maxGPUs: 1
    maxServers: 2
  researchers:
    maxGPUs: 2
    maxServers: 2
`

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	s, err := suite.Begin("profiles e2e", "", suite.QuotaBin, suite.ProfilesBin)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer s.Close()
	configPath = s.Write("profiles.yaml", baseConfig)
	g := s.Gpuhub()
	g.Quota.Policy = s.Write("policy.yaml", policy)
	g.Profiles.Config, g.Profiles.PendingEndAfter = configPath, pendingEndAfter.String()
	readerToken, profilesToken, quotaToken = g.Token, g.Profiles.Token, g.Quota.Token
	profilesURL = gpuhubstack.Profiles{Port: g.Profiles.Port}.URL()
	usageURL = gpuhubstack.Usage{Port: g.Port}.URL()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// alice's recorded GPU use of the last days, in the ledger before the usage API opens it (TestRightSizeAdvice).
	g.UsageDatabase = filepath.Join(s.Dir, "ledger.db")
	if err := seedRightSize(ctx, g.UsageDatabase, time.Now()); err != nil {
		return s.Fail(err)
	}
	// The chart's z2jh values, as an admin installs them, with the usage API, gpu-quota (no waitlist) and
	// gpu-profiles on loopback.
	st, hubAdmin, err = s.Start(ctx, g, gpuhubstack.LocalHub{NoWaitlist: true}, stack.Options{Password: password})
	if err != nil {
		return s.Fail(err)
	}
	defer st.Stop()
	kube = st.Client
	return m.Run()
}
