# syntax=docker/dockerfile:1
# gpu-quota: GPU limits, budgets and the waitlist; pure Go, so a static binary on distroless/static.
#   docker build -f images/gpu-quota.Dockerfile -t ghcr.io/gpuhub/gpu-quota:0.1.0 .
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY hubapi/ hubapi/
COPY services/ services/
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/gpu-quota ./services/gpu-quota

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/gpu-quota /usr/local/bin/gpu-quota
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/gpu-quota"]
