# syntax=docker/dockerfile:1
# configurable-http-proxy as z2jh 4.4.0 runs it (proxy.chp.image: quay.io/jupyterhub/configurable-http-proxy:5.2.0),
# made by `make images` where no registry can be reached; with Docker, the upstream image is the one to use.
# z2jh's proxy Deployment gives the whole command line, so the entrypoint only matters when run by hand.
#   docker build -f images/z2jh/configurable-http-proxy.Dockerfile -t quay.io/jupyterhub/configurable-http-proxy:5.2.0 images/z2jh
FROM node:18-bookworm-slim
RUN npm install --global --no-fund --no-audit configurable-http-proxy@5.2.0 \
 && npm cache clean --force
USER 65534
EXPOSE 8000 8001
ENTRYPOINT ["configurable-http-proxy"]
