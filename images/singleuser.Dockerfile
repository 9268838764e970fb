# syntax=docker/dockerfile:1
# Single-user image with the gpuhub JupyterLab panel. Build the wheel first (`make ext-wheel`), then:
#   docker build -f images/singleuser.Dockerfile -t ghcr.io/gpuhub/singleuser:0.1.0 .
ARG BASE=quay.io/jupyter/base-notebook:2025-12-01
FROM ${BASE}
# Owned by jovyan (NB_UID 1000, NB_GID 100 in the base), who runs the RUN below and removes them again.
COPY --chown=1000:100 notebooks-ext/dist/*.whl /tmp/wheels/
RUN pip install --no-cache-dir /tmp/wheels/*.whl && rm -rf /tmp/wheels
# No "receive official Jupyter news?" toast over the GPU panel, and no update checks from a shared Hub's servers.
COPY images/jupyterlab-overrides.json /opt/conda/share/jupyter/lab/settings/overrides.json
