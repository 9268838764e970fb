#!/usr/bin/env bash
# Builds kube-router into $1 (default $GPUHUB_CACHE/kube-router/<version>/bin); a no-op when it is there.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
version=$(awk '$1=="require" && $2=="github.com/cloudnativelabs/kube-router/v2" {print $3}' "$here/go.mod")
cache=${GPUHUB_CACHE:-$HOME/.cache/gpuhub}
out=${1:-$cache/kube-router/$version/bin}
if [[ -x "$out/kube-router" ]]; then
	echo "kube-router $version: cached in $out"
	exit 0
fi
mkdir -p "$out"
echo "building kube-router $version into $out (cold: 1-2 minutes on 2 cores, downloads included; then cached)"
start=$SECONDS
(cd "$here" && GOWORK=off CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/kube-router.tmp.$$" github.com/cloudnativelabs/kube-router/v2/cmd/kube-router)
mv "$out/kube-router.tmp.$$" "$out/kube-router"
echo "built kube-router in $((SECONDS - start))s"
