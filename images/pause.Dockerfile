# syntax=docker/dockerfile:1
# pause: the sandbox container of every pod on the real node of the e2e tests (containerd's sandbox_image),
# standing in for registry.k8s.io/pause, which cannot be pulled here. A static Go binary on an empty base.
#   docker build -f images/pause.Dockerfile -t ghcr.io/gpuhub/pause:0.1.0 .
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
COPY images/pause/ images/pause/
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/pause ./images/pause

FROM scratch
COPY --from=build /out/pause /pause
USER 65535:65535
ENTRYPOINT ["/pause"]
