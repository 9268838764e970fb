# KubeSpawner configuration of the local cluster's Hub, laid out the way Zero-to-JupyterHub's
# jupyterhub_config.py does it: singleuser settings and profileList come from a values file
# (e2e/hub/values.yaml, z2jh key names), then hub.extraConfig snippets run last, sorted by key.
# e2e/hub/hub.go appends this file to the Hub config that e2e/internal/hubproc generates.
# Settings that differ per run come from the environment:
#   GPUHUB_HUB_VALUES       values file (z2jh subset: singleuser.*, hub.services, hub.loadRoles, hub.extraEnv,
#                           hub.extraConfig)
#   GPUHUB_HUB_CONNECT_URL  how pods reach the Hub (http://127.0.0.1:<hub port>), JUPYTERHUB_API_URL
#   GPUHUB_NAMESPACE        namespace of the single-user pods
#   GPUHUB_EXTRA_CONFIG_DIR optional directory of *.py files run after hub.extraConfig (sorted)
#   KUBECONFIG              the Hub's identity (RBAC role like z2jh's hub Role)
import glob
import os

import yaml

with open(os.environ["GPUHUB_HUB_VALUES"]) as f:
    _values = yaml.safe_load(f) or {}


def get_config(key, default=None):
    """z2jh's z2jh.get_config: dotted key lookup in the values."""
    value = _values
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return default
        value = value[part]
    return value


c.JupyterHub.spawner_class = "kubespawner.KubeSpawner"  # noqa: F821
c.JupyterHub.hub_connect_url = os.environ["GPUHUB_HUB_CONNECT_URL"]  # noqa: F821
c.JupyterHub.allow_named_servers = True  # noqa: F821
c.JupyterHub.named_server_limit_per_user = 3  # noqa: F821

ks = c.KubeSpawner  # noqa: F821
ks.namespace = os.environ.get("GPUHUB_NAMESPACE", "jhub")
ks.image = get_config("singleuser.image", "quay.io/jupyterhub/k8s-singleuser-sample:4.3.2")
ks.image_pull_policy = "IfNotPresent"
ks.cmd = get_config("singleuser.cmd", ["jupyterhub-singleuser"])
ks.default_url = get_config("singleuser.defaultUrl", "/lab")
ks.port = 8888
ks.start_timeout = get_config("singleuser.startTimeout", 180)
ks.http_timeout = get_config("singleuser.httpTimeout", 120)
ks.extra_labels = get_config("singleuser.extraLabels", {})
ks.profile_list = get_config("singleuser.profileList", [])
ks.storage_pvc_ensure = False
ks.services_enabled = False
# z2jh's defaults for the pod: no service-account token, the z2jh network-access label.
ks.automount_service_account_token = False
ks.common_labels = {"app": "jupyterhub", "heritage": "jupyterhub", "release": "gpuhub-local"}
ks.extra_labels.setdefault("hub.jupyter.org/network-access-hub", "true")

# hub.extraEnv: z2jh puts these in the hub pod's environment; here they are set before hub.extraConfig runs.
_extra_env = get_config("hub.extraEnv") or {}
if isinstance(_extra_env, list):  # z2jh also takes a list of EnvVar objects
    _extra_env = {e["name"]: e.get("value", "") for e in _extra_env if isinstance(e, dict) and "name" in e}
for _k, _v in _extra_env.items():
    if isinstance(_v, (str, int, float, bool)):
        os.environ[str(_k)] = str(_v)

# hub.services and hub.loadRoles, as z2jh reads them: dicts keyed by name, appended to the Hub's lists; a service's
# apiToken is its api_token (z2jh takes it from its hub Secret; the local values carry it). The keys are passed on
# as they are, so a key the Hub does not know stops this Hub as it would a z2jh one.
for _name, _service in (get_config("hub.services") or {}).items():
    _service = dict(_service, name=_service.get("name", _name))
    _token = _service.pop("apiToken", None)
    if _token:
        _service["api_token"] = _token
    c.JupyterHub.services.append(_service)  # noqa: F821
for _name, _role in (get_config("hub.loadRoles") or {}).items():
    c.JupyterHub.load_roles.append(dict(_role, name=_role.get("name", _name)))  # noqa: F821

# hub.extraConfig: snippets run last, sorted by key, in this config's namespace (as in z2jh).
for _name, _code in sorted((get_config("hub.extraConfig") or {}).items()):
    exec(compile(_code, f"hub.extraConfig.{_name}", "exec"))

_extra_dir = os.environ.get("GPUHUB_EXTRA_CONFIG_DIR")
if _extra_dir:
    for _path in sorted(glob.glob(os.path.join(_extra_dir, "*.py"))):
        with open(_path) as _f:
            exec(compile(_f.read(), _path, "exec"))
