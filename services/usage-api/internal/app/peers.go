package app

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuhub/gpuhub/hubapi"
	"github.com/gpuhub/gpuhub/hubapi/huboauth"
	"github.com/gpuhub/gpuhub/services/internal/server"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/adminview"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/api"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/budget"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/remote"
)

// PeerConfig says where gpu-quota and gpu-culler answer; an empty URL: that service is not configured.
type PeerConfig struct {
	QuotaURL, CullerURL string
	// Token is the usage API's own Hub token (the Hub service gpu-usage, in the others' --reader-services);
	// Self is its Hub service name, for the errors that say what to configure.
	Token, Self string
	Timeout     time.Duration
	Logger      *slog.Logger
	Registerer  prometheus.Registerer
}

// Peers are the clients of the other services: me's budget (gpu-quota), and the admin view's decisions and
// waitlist (gpu-quota, gpu-culler), briefly cached with short timeouts. Each is nil when its URL is empty.
type Peers struct {
	Budget              api.Budget
	QuotaAPI, CullerAPI adminview.Remote
}

// NewPeers checks the URLs; the error names the flag to fix.
func NewPeers(c PeerConfig) (Peers, error) {
	var p Peers
	if c.QuotaURL != "" {
		bc, err := budget.New(budget.Options{URL: c.QuotaURL, Token: c.Token, Timeout: c.Timeout, Logger: c.Logger, Registerer: c.Registerer})
		if err != nil {
			return Peers{}, fmt.Errorf("--quota-url: %w", err)
		}
		p.Budget = bc
	}
	for _, rc := range []struct {
		service, url string
		into         *adminview.Remote
	}{{"gpu-quota", c.QuotaURL, &p.QuotaAPI}, {"gpu-culler", c.CullerURL, &p.CullerAPI}} {
		if rc.url == "" {
			continue
		}
		rem, err := remote.New(remote.Options{Service: rc.service, URL: rc.url, Token: c.Token, Self: c.Self, Timeout: c.Timeout, Logger: c.Logger})
		if err != nil {
			return Peers{}, fmt.Errorf("--%s-url: %w", strings.TrimPrefix(rc.service, "gpu-"), err)
		}
		*rc.into = rem
	}
	return p, nil
}

// LoginConfig is the admin view's login as the flags give it.
type LoginConfig struct {
	Prefix, ClientID, CallbackURL, HubBaseURL, KeyFile string
	TTL                                                time.Duration
	AdminGroups                                        []string
}

// NewLogin logs people into the admin view with the Hub's OAuth flow: the service's API token is its client
// secret, the code is exchanged on the Hub's API address, the browser goes to the Hub's public authorize path.
func NewLogin(c LoginConfig, hubCfg hubapi.Config, hub *hubapi.Client, reg prometheus.Registerer, logger *slog.Logger) (*huboauth.Login, error) {
	prefix := server.NormalizePrefix(c.Prefix)
	if c.ClientID == "" {
		c.ClientID = "service-" + path.Base(strings.TrimSuffix(prefix, "/"))
	}
	if c.CallbackURL == "" {
		c.CallbackURL = prefix + "oauth_callback"
	}
	base := "/" + strings.Trim(c.HubBaseURL, "/") + "/"
	if base == "//" {
		base = "/"
	}
	var key []byte
	if c.KeyFile != "" {
		b, err := os.ReadFile(c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("--session-key-file: %w", err)
		}
		key = bytes.TrimSpace(b)
	}
	return huboauth.New(huboauth.Options{
		ClientID: c.ClientID, ClientSecret: hubCfg.Token, Hub: hub, AdminGroups: c.AdminGroups, Key: key, SessionTTL: c.TTL,
		AuthorizeURL: base + "hub/api/oauth2/authorize", HubLogoutURL: base + "hub/logout",
		TokenURL: strings.TrimSuffix(hubCfg.URL, "/") + "/oauth2/token", CallbackURL: c.CallbackURL, Prefix: prefix,
		Logger: logger, Registerer: reg,
	})
}
