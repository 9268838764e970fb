# syntax=docker/dockerfile:1
# gpu-culler: stops servers whose GPU sits idle; pure Go, so a static binary on distroless/static.
#   docker build -f images/gpu-culler.Dockerfile -t ghcr.io/gpuhub/gpu-culler:0.1.0 .
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY hubapi/ hubapi/
COPY services/ services/
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/gpu-culler ./services/gpu-culler

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/gpu-culler /usr/local/bin/gpu-culler
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/gpu-culler"]
