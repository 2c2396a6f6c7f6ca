# Everything a fresh machine needs, in order: torch pinned BEFORE the project
# (an unpinned torch pulls a multi-GB CUDA build), then the project itself.
VENV    ?= .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed
TORCH   ?= torch==2.13.0
PYTHON  ?= python3

.PHONY: install browser serve test image-engine test-image test-hosts frontend format schema native bench clean

$(STAMP): pyproject.toml server/gradstep/tracer/_nodes.c
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q $(TORCH) numpy
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

serve: install
	$(VENV)/bin/gradstep serve

# Browser tests drive Debian's chromium (playwright cannot download its own here).
browser:
	@command -v chromium >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq chromium >/dev/null; }

test: install browser
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) -m pytest
	node --test tests/frontend/

# The Docker image, built by a real engine and attacked (tests/sandbox/test_container_image.py): slow
# (≈7 min on a bare machine, ≈1 min once built), so not part of `make test`; CI runs it last.
# Podman and runc (crun refuses hybrid cgroups) and mmdebstrap are installed from Debian where missing.
# The base: IMAGE_BASE, else python:3.11-slim from Docker Hub, else a Debian base built here once
# (deploy/image-base.sh). pip in the build reaches packages as pip does here (its config, PIP_*).
IMAGE_BASE ?=
IMAGE_TOOLS := podman runc mmdebstrap
image-engine:
	@for tool in $(IMAGE_TOOLS); do command -v $$tool >/dev/null 2>&1 || missing=1; done; \
	if [ -n "$$missing" ]; then \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y -qq $(IMAGE_TOOLS) >/dev/null 2>&1 \
	    || { apt-get update -qq && apt-get install -y -qq $(IMAGE_TOOLS) >/dev/null; }; \
	fi

test-image: install image-engine
	base="$$(IMAGE_BASE='$(IMAGE_BASE)' deploy/image-base.sh)" \
	  && GRADSTEP_TEST_IMAGE=1 GRADSTEP_IMAGE_BASE="$$base" $(PY) -m pytest --durations=3 tests/sandbox/test_container_image.py

# The real hosts (JupyterLab, marimo, Sphinx; MyST's model), each started and driven in Chromium:
# slow (≈5 min on 2 shared cores), so not part of `make test`. Missing host packages are installed from
# PyPI into $(VENV) (pins in server/testkit/hosts_support.py); screenshots land in build/screens/.
test-hosts: install browser
	$(PY) -m pytest -m hosts tests/hosts

# Rebuild the vendored, minified front-end libraries from the pinned npm packages.
frontend:
	cd frontend && npm ci && npm run build

format: install
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

# The trace format's copies that are data, from gradstep/schema.py: the JSON Schema, the front-end
# tests' tables, the docs' field tables and example (traced in the sandbox) with its front-end copy;
# and the docs' list of diagnosis kinds, from gradstep/diagnose/registry.py.
schema: install
	$(PY) -c "import json, gradstep.schema as s; print(json.dumps(s.json_schema(), indent=2))" > server/gradstep/trace.schema.json
	$(PY) tests/trace/trace_copies.py

# The C node reader (tracer/_nodes.c), rebuilt in place, then checked against the schema. The
# extension is optional at install (no compiler: the Python reader, slower): here a failed build fails.
native:
	$(PY) -c "from setuptools import setup; setup()" -q build_ext --inplace
	PYTHONPATH=$(CURDIR)/server $(PY) -c "import gradstep.tracer._nodes"
	PYTHONPATH=$(CURDIR)/server $(PY) -m pytest -q -p no:cacheprovider tests/tracer/test_tracer_seam.py -k "fields or schema or built_module"

bench: install
	$(PY) benchmarks/tracer_overhead.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
