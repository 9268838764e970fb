# syntax=docker/dockerfile:1
# gpu-profiles: the spawn form's GPU choices; pure Go, so a static binary on distroless/static.
#   docker build -f images/gpu-profiles.Dockerfile -t ghcr.io/gpuhub/gpu-profiles:0.1.0 .
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY hubapi/ hubapi/
COPY services/ services/
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/gpu-profiles ./services/gpu-profiles

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/gpu-profiles /usr/local/bin/gpu-profiles
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/gpu-profiles"]
