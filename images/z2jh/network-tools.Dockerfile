# syntax=docker/dockerfile:1
# z2jh 4.4.0's network-tools image (singleuser.networkTools.image: quay.io/jupyterhub/k8s-network-tools, tagged
# 4.4.0 by the released chart), made by `make images` where no registry can be reached; with Docker, the
# upstream image is the one to use.
#   docker build -f images/z2jh/network-tools.Dockerfile -t quay.io/jupyterhub/k8s-network-tools:4.4.0 images/z2jh
# z2jh runs it in two init containers, giving the whole command each time:
#   - block-cloud-metadata, in every user pod (jupyterhub_config.py, singleuser.cloudMetadata.blockWithIptables):
#     `iptables --append OUTPUT --protocol tcp --destination 169.254.169.254 --destination-port 80 --jump DROP`,
#     as root, privileged, with NET_ADMIN, in the pod's network namespace;
#   - image-pull-metadata-block, in the image-puller DaemonSets: `/bin/sh -c 'echo "Pulling complete"'`, as
#     65534:65534 with every capability dropped.
# z2jh's recipe (images/network-tools/Dockerfile) is `FROM alpine:3.18` and `apk add --no-cache iptables`, and
# stays on Alpine 3.18 because its iptables (1.8.9) is the legacy, x_tables one: Alpine 3.19's works in
# nf_tables mode and broke the first init container (z2jh issue #3368). Alpine's packages cannot be reached
# here, so this is Debian 12's iptables, the same 1.8.9, whose `iptables` is the nf_tables one unless the
# alternative is set: it is set to iptables-legacy (and ip6tables to ip6tables-legacy), as z2jh's image has them.
# What differs: Debian 12 (glibc, dash as /bin/sh, dpkg and apt) instead of Alpine 3.18 (musl, busybox, apk);
# iptables is /usr/sbin/iptables (and /sbin/iptables through Debian's merged /usr) -> /etc/alternatives, not
# Alpine's /sbin/iptables -> xtables-legacy-multi. User root and command /bin/sh, as Alpine's image has.
FROM debian:bookworm-slim
# Bookworm's current version, as a rebuilt upstream image has it: security updates replace pinned ones.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends iptables \
 && update-alternatives --set iptables /usr/sbin/iptables-legacy \
 && update-alternatives --set ip6tables /usr/sbin/ip6tables-legacy \
 && rm -rf /var/lib/apt/lists/*
CMD ["/bin/sh"]
