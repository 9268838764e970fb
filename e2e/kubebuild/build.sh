#!/usr/bin/env bash
# Builds kube-apiserver, kube-scheduler, kube-controller-manager, kubelet and kube-proxy (the real node, e2e/realnode) into $1 (default
# $GPUHUB_CACHE/kube/<version>/bin). Skips binaries that already exist, so a second run takes no time.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
version=$(awk '$1=="require" && $2=="k8s.io/kubernetes" {print $3}' "$here/go.mod")
cache=${GPUHUB_CACHE:-$HOME/.cache/gpuhub}
out=${1:-$cache/kube/$version/bin}
cmds=(kube-apiserver kube-scheduler kube-controller-manager kubelet kube-proxy)
missing=()
for c in "${cmds[@]}"; do [[ -x "$out/$c" ]] || missing+=("$c"); done
if [[ ${#missing[@]} -eq 0 ]]; then
	echo "kube binaries $version: cached in $out"
	exit 0
fi
mkdir -p "$out"
pkg=k8s.io/component-base/version
ldflags="-s -w -X $pkg.gitVersion=$version -X $pkg.gitTreeState=clean"
ldflags="$ldflags -X $pkg.gitMajor=$(echo "${version#v}" | cut -d. -f1) -X $pkg.gitMinor=$(echo "$version" | cut -d. -f2)"
# One go build for all missing binaries: their packages compile in parallel and share the cache.
pkgs=()
for c in "${missing[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
echo "building ${missing[*]} $version into $out (cold: 7+ minutes on 2 cores, downloads included; then cached)"
start=$SECONDS
tmp="$out/.tmp.$$"
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
(cd "$here" && GOWORK=off CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$tmp/" "${pkgs[@]}")
for c in "${missing[@]}"; do mv "$tmp/$c" "$out/$c"; done
echo "built ${missing[*]} in $((SECONDS - start))s"
