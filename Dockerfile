# gradstep: one stateless replica. Build and run: see docs/deploy.md (and README "Docker").
#
# The sandbox confines each snippet itself, per child, and needs for that what an ordinary
# container does not give: the server runs as root *inside* the container (root in a user
# namespace, e.g. rootless Docker/Podman or userns-remap; Kubernetes: hostUsers: false) with
# CAP_SYS_ADMIN (unshare, mounts), a seccomp profile that lets it call unshare/mount/
# mount_setattr (deploy/seccomp.json) and no AppArmor mount rule in the way. Every child drops
# to an unprivileged uid with no capabilities, no_new_privs and its own, stricter seccomp
# filter before a snippet runs. Without those grants the server refuses to start
# (GRADSTEP_REQUIRE_LAYERS) instead of running snippets unconfined.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /srv/gradstep

# libseccomp2 for the children's seccomp filter (pyseccomp loads it).
RUN apt-get update \
 && apt-get install -y --no-install-recommends libseccomp2 \
 && rm -rf /var/lib/apt/lists/*

# CPU-only torch, pinned, before the project (the default index's build pulls in CUDA: GBs).
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
RUN pip install --index-url "$TORCH_INDEX_URL" torch==2.13.0 \
 && pip install numpy \
 && python -c "import torch; assert torch.version.cuda is None, 'not the CPU build of torch'"

COPY pyproject.toml README.md ./
COPY server ./server
COPY snippets ./snippets
COPY frontend ./frontend
RUN pip install . && rm -rf /srv/gradstep/server /srv/gradstep/build

# Per-slot cgroups need a writable cgroup v1 hierarchy, which containers do not get: the
# container's own --memory and --pids-limit stand in for them. Every other layer is required.
ENV GRADSTEP_HOST=0.0.0.0 \
    GRADSTEP_PORT=8000 \
    GRADSTEP_REQUIRE_LAYERS=setsid,close_fds,namespaces,mounts,rlimits,uid,no_new_privs,seccomp

# Root in the container (see the top of this file); snippets never run as root.
USER root
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=3 \
  CMD ["python", "-c", "import json, sys, urllib.request; h = json.load(urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2)); sys.exit(h['status'] != 'ok')"]
CMD ["gradstep", "serve", "--host", "0.0.0.0", "--port", "8000"]
