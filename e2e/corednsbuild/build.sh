#!/usr/bin/env bash
# Builds CoreDNS into $1 (default $GPUHUB_CACHE/coredns/<version>/bin); a no-op when it is there.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
version=$(awk '$1=="require" && $2=="github.com/coredns/coredns" {print $3}' "$here/go.mod")
cache=${GPUHUB_CACHE:-$HOME/.cache/gpuhub}
out=${1:-$cache/coredns/$version/bin}
if [[ -x "$out/coredns" ]]; then
	echo "coredns $version: cached in $out"
	exit 0
fi
mkdir -p "$out"
echo "building coredns $version into $out (cold: 2-3 minutes on 2 cores, downloads included; then cached)"
start=$SECONDS
(cd "$here" && GOWORK=off CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/coredns.tmp.$$" github.com/coredns/coredns)
mv "$out/coredns.tmp.$$" "$out/coredns"
echo "built coredns in $((SECONDS - start))s"
