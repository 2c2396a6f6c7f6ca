#!/usr/bin/env bash
# Prints the base to build the image from (the Dockerfile's BASE_IMAGE), for `make test-image`:
#   $IMAGE_BASE, when set;
#   else the Dockerfile's own base (python:3.11-slim), when podman can pull it from Docker Hub;
#   else a Debian base of this machine's release with python3, python3-venv and ca-certificates,
#   built with mmdebstrap from the Debian archives this machine's apt uses and imported as
#   localhost/gradstep-base (once: an existing one is reused; `podman rmi localhost/gradstep-base`
#   to rebuild it).
# Progress goes to stderr; stdout is the base alone.
set -euo pipefail

if [[ -n "${IMAGE_BASE:-}" ]]; then
	echo "$IMAGE_BASE"
	exit 0
fi

hub=docker.io/library/python:3.11-slim
if podman pull -q "$hub" >/dev/null 2>&1; then
	echo "$hub"
	exit 0
fi

local=localhost/gradstep-base
if podman image exists "$local"; then
	echo "image-base: reusing $local" >&2
	echo "$local"
	exit 0
fi

# This machine's release (its python3 is what the image's venv gets), and the Debian archives
# its apt reads (a mirror, updates, security), as one-line sources for the base's own apt.
. /etc/os-release
debian_sources() {
	apt-get indextargets --format '$(REPO_URI) $(RELEASE) $(COMPONENT)' \
		'Created-By: Packages' 'Origin: Debian' 'Component: main' 2>/dev/null | sort -u
}
[[ -n "$(debian_sources)" ]] || apt-get update -qq >&2 # apt's lists say where its Debian archives are
mirrors=()
while read -r uri release component; do
	mirrors+=("deb $uri $release $component")
done < <(debian_sources)
# Still none: mmdebstrap's default, deb.debian.org with updates and security.

tar="$(mktemp --suffix=.tar)"
trap 'rm -f "$tar"' EXIT
start=$SECONDS
echo "image-base: Docker Hub not reachable; building $local ($VERSION_CODENAME) with mmdebstrap" >&2
mmdebstrap --quiet --variant=minbase --include=python3,python3-venv,ca-certificates \
	"$VERSION_CODENAME" "$tar" "${mirrors[@]}" >&2
podman import --quiet "$tar" "$local" >/dev/null
echo "image-base: $local built in $((SECONDS - start)) s" >&2
echo "$local"
