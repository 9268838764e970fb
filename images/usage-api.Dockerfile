# syntax=docker/dockerfile:1
# Usage API: pure Go (the SQLite driver is modernc.org/sqlite), so a static binary on distroless/static.
#   docker build -f images/usage-api.Dockerfile -t ghcr.io/gpuhub/usage-api:0.1.0 .
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY hubapi/ hubapi/
COPY services/ services/
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/usage-api ./services/usage-api

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/usage-api /usr/local/bin/usage-api
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/usage-api"]
