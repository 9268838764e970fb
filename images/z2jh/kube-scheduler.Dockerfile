# syntax=docker/dockerfile:1
# kube-scheduler as z2jh 4.4.0's user-scheduler runs it (scheduling.userScheduler.image:
# registry.k8s.io/kube-scheduler:v1.30.14; z2jh's ClusterRole is kube-scheduler 1.30's), made by `make images`
# where no registry can be reached; with Docker, the upstream image is the one to use. Built from the
# repository root: the build module e2e/userschedulerbuild pins k8s.io/kubernetes v1.30.14 (its staging modules
# at v0.30.14), and the version flags are those of e2e/userschedulerbuild/build.sh.
#   docker build -f images/z2jh/kube-scheduler.Dockerfile -t registry.k8s.io/kube-scheduler:v1.30.14 .
# Upstream's image is kubernetes' build/server-image: the binary in /usr/local/bin on go-runner
# (registry.k8s.io/build-image/go-runner, itself gcr.io/distroless/static-debian12, root, workdir /, entrypoint
# /go-runner). What differs: no /go-runner (k8s.io/release's go-runner is not on the Go module proxy here),
# so the entrypoint is kube-scheduler itself; built with Go 1.26, not the Go 1.23 of the 1.30 release; no
# gitCommit or buildDate in `--version`. z2jh's Deployment gives the whole command
# (/usr/local/bin/kube-scheduler --config=... --authentication-skip-lookup=true --v=N) and runs it as
# 65534:65534, so the entrypoint and user only matter when the image is run by hand.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY e2e/userschedulerbuild/go.mod e2e/userschedulerbuild/go.sum ./
RUN CGO_ENABLED=0 go build -trimpath \
    -ldflags="-s -w -X k8s.io/component-base/version.gitVersion=v1.30.14 -X k8s.io/component-base/version.gitTreeState=clean -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=30" \
    -o /out/kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler

# go-runner's base: distroless static's root variant (the untagged image go-runner's build names).
# hadolint ignore=DL3007
FROM gcr.io/distroless/static-debian12:latest
COPY --from=build /out/kube-scheduler /usr/local/bin/kube-scheduler
# Root, as upstream's image (it sets no USER over distroless static's 0); z2jh overrides it.
# hadolint ignore=DL3002
USER 0:0
ENTRYPOINT ["/usr/local/bin/kube-scheduler"]
