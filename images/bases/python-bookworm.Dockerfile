# syntax=docker/dockerfile:1
# The Debian-built equivalent of python:3.12-bookworm (z2jh's hub recipe builds its wheels in it): the slim
# equivalent plus the compilers and headers that pycurl and psycopg2 are built with (the upstream image is
# buildpack-deps, which has these and more).
FROM python:3.12-slim-bookworm
# Bookworm's current versions, as the rebuilt upstream image has them: security updates replace pinned ones.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential python3-dev libcurl4-openssl-dev libssl-dev libpq-dev pkg-config \
 && rm -rf /var/lib/apt/lists/*
