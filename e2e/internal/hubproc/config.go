package hubproc

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"text/template"
)

//go:embed jupyterhub_config.py.tmpl
var configTemplate string

// configTmpl renders jupyterhub_config.py. Values go through "py", which writes JSON: for strings,
// lists and dicts of strings JSON is also a valid Python literal, so no value can break out of its
// literal whatever characters it holds.
var configTmpl = template.Must(template.New("jupyterhub_config.py").
	Funcs(template.FuncMap{"py": pyLiteral, "pybool": pyBool}).
	Parse(configTemplate))

// configData is what the template sees; everything is resolved before rendering.
type configData struct {
	WorkDir      string
	DBURL        string
	ProxyPort    int
	ProxyAPIPort int
	HubPort      int
	CHP          string
	LogLevel     string
	Password     string
	AllowAll     bool
	Users        []string
	Admins       []string
	Groups       map[string]groupConfig
	Services     []serviceConfig
	Roles        []roleConfig
	Spawner      string
	LocalSpawner bool // a LocalProcessSpawner-family spawner: set the command, home and env
	SingleUser   []string
	SpawnerArgs  []string
	SpawnerEnv   map[string]string
	ExtraConfig  string
}

type groupConfig struct {
	Users []string `json:"users"`
}

// serviceConfig holds only keys the Hub accepts: an unknown key in a service dict crashes it.
type serviceConfig struct {
	Name     string `json:"name"`
	APIToken string `json:"api_token"`
	URL      string `json:"url,omitempty"`
}

type roleConfig struct {
	Name        string   `json:"name"`
	Description string   `json:"description,omitempty"`
	Scopes      []string `json:"scopes,omitempty"`
	Users       []string `json:"users,omitempty"`
	Groups      []string `json:"groups,omitempty"`
	Services    []string `json:"services,omitempty"`
}

func renderConfig(d configData) ([]byte, error) {
	var buf bytes.Buffer
	if err := configTmpl.Execute(&buf, d); err != nil {
		return nil, fmt.Errorf("render jupyterhub_config.py: %w", err)
	}
	return buf.Bytes(), nil
}

func pyLiteral(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	// null, true and false are not Python: only strings, numbers, lists and dicts may pass.
	var tree any
	if err := json.Unmarshal(b, &tree); err != nil {
		return "", err
	}
	if !pythonSafe(tree) {
		return "", fmt.Errorf("value %s has null or a boolean, which are no Python literals", b)
	}
	return string(b), nil
}

func pyBool(b bool) string {
	if b {
		return "True"
	}
	return "False"
}

func pythonSafe(v any) bool {
	switch v := v.(type) {
	case string, float64:
		return true
	case []any:
		for _, e := range v {
			if !pythonSafe(e) {
				return false
			}
		}
		return true
	case map[string]any:
		for _, e := range v {
			if !pythonSafe(e) {
				return false
			}
		}
		return true
	}
	return false
}
