#!/usr/bin/env bash
# Builds a small virtualenv with one version of jupyterhub-idle-culler (from PyPI), for the side-by-side test of
# gpu-culler (e2e/cullere2e). Usage: idleculler-venv.sh VERSION DIR. Skips the build when DIR's stamp says it
# holds that version for this Python; a failed build leaves no stamp, so the next run starts over.
set -euo pipefail

version=${1:?usage: idleculler-venv.sh VERSION DIR}
dir=${2:?usage: idleculler-venv.sh VERSION DIR}
python=${PYTHON3:-python3}

command -v "$python" >/dev/null || { echo "ERROR: $python not found; install it: apt-get install -y python3 python3-venv"; exit 1; }
want=$(printf 'jupyterhub-idle-culler==%s\n%s\n' "$version" "$("$python" --version)" | sha256sum | cut -d' ' -f1)
if [[ -x "$dir/bin/python" && "$(cat "$dir/.requirements.sha256" 2>/dev/null)" == "$want" ]]; then
  echo "==> venv $dir is up to date (jupyterhub-idle-culler $version)"
  exit 0
fi
echo "==> building venv $dir with $("$python" --version): jupyterhub-idle-culler==$version (PyPI)"
rm -rf "$dir"
mkdir -p "$(dirname "$dir")"
"$python" -m venv "$dir"
"$dir/bin/python" -m pip install --disable-pip-version-check --quiet "jupyterhub-idle-culler==$version"
got=$("$dir/bin/python" -c 'import importlib.metadata as m; print(m.version("jupyterhub-idle-culler"))')
[[ "$got" == "$version" ]] || { echo "ERROR: $dir holds jupyterhub-idle-culler $got, not $version"; exit 1; }
echo "$want" > "$dir/.requirements.sha256"
echo "==> venv $dir ready: jupyterhub-idle-culler $got"
