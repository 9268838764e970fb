# syntax=docker/dockerfile:1
# GPU agent: cgo is on because go-nvml dlopens libnvidia-ml.so.1 (injected by the NVIDIA container runtime),
# so the runtime image needs glibc. Build from the repository root:
#   docker build -f images/gpu-agent.Dockerfile -t ghcr.io/gpuhub/gpu-agent:0.1.0 .
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY hubapi/ hubapi/
COPY services/ services/
RUN CGO_ENABLED=1 go build -trimpath -ldflags="-s -w" -o /out/gpu-agent ./services/gpu-agent

FROM gcr.io/distroless/base-debian12:nonroot
COPY --from=build /out/gpu-agent /usr/local/bin/gpu-agent
# Root is needed only to read other users' /proc/<pid>/cgroup on some kernels; the chart drops all capabilities.
# hadolint ignore=DL3002
USER 0:0
ENTRYPOINT ["/usr/local/bin/gpu-agent"]
