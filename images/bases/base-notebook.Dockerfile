# syntax=docker/dockerfile:1
# The Debian-built equivalent of quay.io/jupyter/base-notebook:2025-12-01, the base of images/singleuser.Dockerfile,
# made by `make images` where no registry can be reached. Like the upstream image: user jovyan (1000, group
# users 100) in /home/jovyan, the Python environment at /opt/conda owned by jovyan with JupyterLab 4 and
# jupyterhub-singleuser, tini as init, port 8888. What differs: the environment is a venv of Debian 12's Python
# 3.11, not conda; the versions are the local cluster's (e2e/requirements-hub55.txt); there is no start.sh or
# start-notebook.py, so the command is jupyterhub-singleuser itself (what z2jh's singleuser.cmd runs anyway).
FROM debian:bookworm-slim
ENV NB_USER=jovyan NB_UID=1000 NB_GID=100 CONDA_DIR=/opt/conda HOME=/home/jovyan SHELL=/bin/bash LANG=C.UTF-8
# Bookworm's current versions, as the rebuilt upstream image has them: security updates replace pinned ones.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv tini ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --no-log-init --create-home --shell /bin/bash --uid "${NB_UID}" --no-user-group --gid "${NB_GID}" "${NB_USER}" \
 && python3 -m venv "${CONDA_DIR}" \
 && "${CONDA_DIR}/bin/pip" install --no-cache-dir jupyterhub==5.5.4 jupyterlab==4.6.6 \
 && chown -R "${NB_UID}:${NB_GID}" "${CONDA_DIR}"
ENV PATH=/opt/conda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
USER 1000
WORKDIR /home/jovyan
EXPOSE 8888
ENTRYPOINT ["tini", "-g", "--"]
CMD ["jupyterhub-singleuser"]
