# dynagent: `make demo` and `make test` work on a fresh clone with only Python 3.11+.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Determined's own client (its API bindings and the `det` CLI) proves the local master in
# dynagent.testing answers as a real one does. It pins requests<2.32, which drags the
# Google clients back, so it gets a virtual environment of its own with the core package.
DET_VENV := .venv-det
DET_STAMP := $(DET_VENV)/.installed

.PHONY: demo demo-gcp test lint typecheck unit docs machine-tools bench reliability sam clean

# The project's virtual environment, rebuilt when pyproject.toml changes.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/dynagent demo

# The same day on GCP: a local Compute Engine and the gcloud SDK's Pub/Sub emulator.
demo-gcp: $(STAMP)
	$(BIN)/dynagent demo --cloud gcp

test: lint typecheck docs unit

lint: $(STAMP)
	$(BIN)/ruff check shared functions tests bench infra
	$(BIN)/ruff format --check shared functions tests bench infra

typecheck: $(STAMP)
	$(BIN)/mypy

# The documentation site (mkdocs.yml, docs/) into .venv/site; strict, so a broken link,
# anchor or include fails the build.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir $(VENV)/site

unit: $(STAMP) $(DET_STAMP) machine-tools
	$(BIN)/pytest -q -n 2
	$(DET_VENV)/bin/pytest -q -p no:cacheprovider tests/determined

# The agent machine tests (tests/machines) boot user data on a real Docker Engine: as root
# with apt-get, install Debian's docker.io and busybox-static where dockerd or the static
# busybox is missing; otherwise do nothing (the tests then skip, saying why, or fail in CI).
machine-tools:
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
		&& ! { command -v dockerd && dpkg -s busybox-static; } >/dev/null 2>&1; then \
		echo "installing docker.io and busybox-static for the agent machine tests"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
			apt-get install -y -qq --no-install-recommends docker.io busybox-static >/dev/null; \
	fi

$(DET_STAMP): pyproject.toml tests/determined/requirements.txt
	$(PYTHON) -m venv $(DET_VENV)
	$(DET_VENV)/bin/pip install --quiet --upgrade pip
	$(DET_VENV)/bin/pip install --quiet -e . -r tests/determined/requirements.txt
	touch $(DET_STAMP)

clean:
	rm -rf $(VENV) $(DET_VENV) .venv-sam .aws-sam .pytest_cache .mypy_cache .ruff_cache

# --- AWS SAM deployment (infra/aws/README.md) ------------------------------------------
# `make sam`: lint template.yaml and build .aws-sam/ for `sam deploy`, offline: no AWS
# account or credentials. DYNAGENT_CONFIG_FILE=path picks the pool config to pack.
# The SAM CLI pins boto3 and pydantic, so it gets a virtual environment of its own.
SAM_VENV := .venv-sam
SAM_STAMP := $(SAM_VENV)/.installed
SAM := AWS_DEFAULT_REGION=$(or $(AWS_DEFAULT_REGION),us-east-1) AWS_EC2_METADATA_DISABLED=true \
	SAM_CLI_TELEMETRY=0 SAM_BUILD_PYTHON=$(abspath $(SAM_VENV))/bin/python $(SAM_VENV)/bin/sam

$(SAM_STAMP): infra/aws/sam-requirements.txt
	$(PYTHON) -m venv $(SAM_VENV)
	$(SAM_VENV)/bin/pip install --quiet --upgrade pip
	$(SAM_VENV)/bin/pip install --quiet -r infra/aws/sam-requirements.txt
	touch $(SAM_STAMP)

sam: $(SAM_STAMP)
	$(SAM) validate --lint
	$(SAM) build

# --- Benchmarks (bench/, docs/performance.md) ------------------------------------------
# `make bench`: handler CPU, cloud API calls per reconcile against the local AWS, cold
# starts, and the simulator over the shared traces (../shared/traces/itp, else the one
# in bench/traces/itp, or DYNAGENT_TRACES=dir). Figures and the machine go to bench/results.json; a few minutes.
BENCH_OUT ?= bench/results.json

bench: $(STAMP)
	$(BIN)/python bench/run.py $(BENCH_OUT)
	$(BIN)/python -m tests.reliability --long

# `make reliability`: load and faults against the local clouds (tests/reliability) at the
# issue's sizes (1,000 fuzzed records, ...), one table of figures; exits 1 if any is off
# its target. `make test` runs a short form of every scenario; `make bench` this one.
reliability: $(STAMP)
	$(BIN)/python -m tests.reliability --long
