#!/usr/bin/env bash
# Builds kube-scheduler at the version z2jh 4.4.0's user-scheduler runs (this module's k8s.io/kubernetes) into
# $1 (default $GPUHUB_CACHE/kube/<version>/bin). Skips the build when the binary is there, so a second run takes
# no time. The image (images/z2jh/kube-scheduler.Dockerfile, `make images`) runs the same `go build`, flags
# included, so one build warms Go's cache for the other.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
version=$(awk '$1=="require" && $2=="k8s.io/kubernetes" {print $3}' "$here/go.mod")
cache=${GPUHUB_CACHE:-$HOME/.cache/gpuhub}
out=${1:-$cache/kube/$version/bin}
if [[ -x "$out/kube-scheduler" ]]; then
	echo "kube-scheduler $version: cached in $out"
	exit 0
fi
mkdir -p "$out"
pkg=k8s.io/component-base/version
ldflags="-s -w -X $pkg.gitVersion=$version -X $pkg.gitTreeState=clean"
ldflags="$ldflags -X $pkg.gitMajor=$(echo "${version#v}" | cut -d. -f1) -X $pkg.gitMinor=$(echo "$version" | cut -d. -f2)"
echo "building kube-scheduler $version into $out (cold: about 3 minutes on 2 cores, downloads excluded; then cached)"
start=$SECONDS
tmp="$out/.tmp.$$"
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
(cd "$here" && GOWORK=off CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$tmp/kube-scheduler" k8s.io/kubernetes/cmd/kube-scheduler)
mv "$tmp/kube-scheduler" "$out/kube-scheduler"
echo "built kube-scheduler $version in $((SECONDS - start))s"
