# syntax=docker/dockerfile:1
# The Debian-built equivalent of a node:*-bookworm-slim image: Debian 12's nodejs (18.x) and npm.
FROM debian:bookworm-slim
# Bookworm's current versions, as the rebuilt upstream image has them: security updates replace pinned ones.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends nodejs npm ca-certificates \
 && rm -rf /var/lib/apt/lists/*
CMD ["node"]
