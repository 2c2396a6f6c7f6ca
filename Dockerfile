# gradstep: one stateless replica. Build and run: see docs/deploy.md (and README "Docker").
#
# The server runs as the unprivileged user gradstep (uid 10001), which owns nothing in the image.
# The sandbox confines each snippet itself, per child, and needs for that five capabilities:
# SYS_ADMIN (unshare, the mounts), SETUID/SETGID (each child's own uid), SETPCAP (each child
# empties its bounding set) and KILL (the zygote kills children of other uids). A non-root process
# gets capabilities only from a file that carries them, so the server runs under a copy of the
# interpreter with exactly these as file capabilities (setcap, below), executable by gradstep
# alone. The container must allow them: --cap-add them (they go into the bounding set; a missing
# one makes the exec fail with "operation not permitted"), a seccomp profile that lets the server
# call unshare/mount/mount_setattr (deploy/seccomp.json), no AppArmor mount rule in the way, and
# NOT no_new_privs (Docker --security-opt no-new-privileges, Kubernetes allowPrivilegeEscalation:
# false), under which the kernel withholds file capabilities. Every child drops to an
# unprivileged uid of its own with no capability in any set, no_new_privs and its own, stricter
# seccomp filter before a snippet runs. Without those grants the server refuses to start
# (GRADSTEP_REQUIRE_LAYERS) instead of running snippets unconfined, saying what it lacks.
# The base: any Debian-like image with python3 (3.11+) and its venv module. Where Docker Hub can't
# be pulled, a local one does (docs/deploy.md: mmdebstrap + podman import, --build-arg BASE_IMAGE=...).
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/gradstep/bin:$PATH
WORKDIR /srv/gradstep

# libseccomp2 for the children's seccomp filter (pyseccomp loads it); libcap2-bin for setcap/getcap.
# The project lives in a venv (a distribution's own python3 refuses a system-wide pip install).
RUN apt-get update \
 && apt-get install -y --no-install-recommends libseccomp2 libcap2-bin \
 && rm -rf /var/lib/apt/lists/* \
 && python3 -m venv /opt/gradstep

# Where pip finds packages, for builds behind a mirror or a TLS-intercepting proxy (unset: PyPI).
# Build arguments, not ENV: they shape this build only and stay out of the image.
ARG PIP_INDEX_URL
ARG PIP_EXTRA_INDEX_URL
ARG PIP_FIND_LINKS
ARG PIP_CERT

# CPU-only torch, pinned, before the project (the default index's build pulls in CUDA: GBs).
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
RUN pip install --index-url "$TORCH_INDEX_URL" torch==2.13.0 \
 && pip install numpy \
 && python -c "import torch; assert torch.version.cuda is None, 'not the CPU build of torch'"

COPY pyproject.toml README.md ./
COPY server ./server
COPY snippets ./snippets
COPY frontend ./frontend
# gcc builds the tracer's C node reader (optional in pyproject.toml: without it the tracer reads
# nodes in Python, slower); the import check makes a failed build fail the image instead. A
# distribution's python3 keeps its headers in python3-dev (python:3.11-slim has them).
RUN headers="$(python -c 'import sysconfig; print(sysconfig.get_paths()["include"])')" \
 && dev="gcc libc6-dev $(test -f "$headers/Python.h" || echo python3-dev)" \
 && apt-get update \
 && apt-get install -y --no-install-recommends $dev \
 && pip install . \
 && python -c "import gradstep.tracer._nodes" \
 && apt-get purge -y --auto-remove $dev \
 && rm -rf /var/lib/apt/lists/* /srv/gradstep/server /srv/gradstep/build

# The user, and the interpreter copy that carries the sandbox's capabilities (root-owned, mode
# 0750: only gradstep and root can run it; any other python in the image has none). The copy sits
# in the venv's bin/, so it runs with the venv's packages.
RUN groupadd --system --gid 10001 gradstep \
 && useradd --system --uid 10001 --gid gradstep --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin gradstep \
 && install -o root -g gradstep -m 0750 "$(readlink -f /opt/gradstep/bin/python3)" /opt/gradstep/bin/gradstep-python \
 && setcap cap_sys_admin,cap_setuid,cap_setgid,cap_setpcap,cap_kill+ep /opt/gradstep/bin/gradstep-python \
 && getcap /opt/gradstep/bin/gradstep-python

# Per-slot cgroups need a writable cgroup v1 hierarchy, which containers do not get: the
# container's own --memory and --pids-limit stand in for them. Every other layer is required.
ENV GRADSTEP_HOST=0.0.0.0 \
    GRADSTEP_PORT=8000 \
    GRADSTEP_REQUIRE_LAYERS=setsid,close_fds,namespaces,pidns,root,mounts,rlimits,uid,no_new_privs,seccomp

USER 10001:10001
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=3 \
  CMD ["python", "-c", "import json, sys, urllib.request; h = json.load(urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2)); sys.exit(h['status'] != 'ok')"]
# `gradstep serve`, run by the capability-bearing interpreter (the `gradstep` script's own
# interpreter has no capabilities): the sandbox's zygote is started with this same executable.
CMD ["/opt/gradstep/bin/gradstep-python", "-m", "gradstep", "serve", "--host", "0.0.0.0", "--port", "8000"]
