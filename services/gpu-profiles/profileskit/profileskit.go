// Package profileskit is gpu-profiles' one door for the tools (the trace replay in services/replay), which Go's
// internal rule keeps out of services/gpu-profiles/internal: the catalog (the inventory by kind, fed by pod and
// node events), the generated choices and one user's form. It has no logic of its own: aliases and one-line
// wrappers.
package profileskit

import (
	"github.com/gpuhub/gpuhub/services/gpu-profiles/internal/catalog"
	"github.com/gpuhub/gpuhub/services/gpu-profiles/internal/profiles"
	"github.com/gpuhub/gpuhub/services/internal/contract"
	ipolicy "github.com/gpuhub/gpuhub/services/internal/policy"
)

// The catalog and one kind's status (internal/catalog).
type (
	Catalog        = catalog.Catalog
	CatalogOptions = catalog.Options
	KindStatus     = catalog.KindStatus
)

// The overrides file, choices and one user's form (internal/profiles).
type (
	Config  = profiles.Config
	Choice  = profiles.Choice
	Profile = profiles.Profile
	Verdict = contract.Verdict
)

// NewCatalog is catalog.New.
func NewCatalog(o CatalogOptions) *Catalog { return catalog.New(o) }

// Choices is profiles.Choices.
func Choices(kinds []KindStatus, cfg *Config) []Choice { return profiles.Choices(kinds, cfg) }

// ForUser is profiles.ForUser.
func ForUser(choices []Choice, verdicts map[string]Verdict, defaultSlug string) []Profile {
	return profiles.ForUser(choices, verdicts, defaultSlug)
}

// Visible is profiles.Visible.
func Visible(choices []Choice, groups []string) []Choice { return profiles.Visible(choices, groups) }

// ParseConfig reads an overrides file as gpu-profiles does: strict YAML, validated.
func ParseConfig(name string, data []byte) (*Config, error) {
	c := &profiles.Config{}
	if err := ipolicy.Decode(name, data, c); err != nil {
		return nil, err
	}
	return c, nil
}
