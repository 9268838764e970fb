# syntax=docker/dockerfile:1
# The Debian-built equivalent of python:3.12-slim-bookworm, made by `make images` where no registry can be
# reached (z2jh's hub recipe starts from that image). What differs from the upstream image: Python is
# Debian 12's python3 (3.11) at /usr/bin, not a build of 3.12 from python.org at /usr/local; `python` and `pip`
# are links to it; Debian's "externally managed" marker is removed so that `pip install` works as in the
# upstream image.
FROM debian:bookworm-slim
# Bookworm's current versions, as the rebuilt upstream image has them: security updates replace pinned ones.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-pip python3-venv ca-certificates adduser \
 && rm -rf /var/lib/apt/lists/* \
 && ln -s /usr/bin/python3 /usr/local/bin/python \
 && ln -s /usr/bin/pip3 /usr/local/bin/pip \
 && rm -f /usr/lib/python3*/EXTERNALLY-MANAGED
ENV LANG=C.UTF-8
CMD ["python3"]
