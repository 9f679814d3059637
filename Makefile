# TauGrid: one venv (.venv) with pinned dependencies, installed on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat requirements/dev.lock pyproject.toml | sha256sum | cut -c1-12)

.PHONY: setup pyc run render test controlplane e2e lint fmt bench clean

setup: $(STAMP)

$(STAMP): requirements/dev.lock pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements/dev.lock
	$(BIN)/python -m pip install --quiet --no-deps -e .
	@rm -f $(VENV)/.installed-* && touch $@

# Byte-compile the sources (pip does this for installed packages; with PYTHONDONTWRITEBYTECODE
# set, an editable checkout would otherwise recompile every module on every `tau` start, +0.1 s).
pyc:
	@$(BIN)/python -m compileall -q api runs cli components infra runlib > /dev/null

# The main job: run the quickstart on this machine (a local Ray head on 127.0.0.1), then
# check its sealed evidence record.
run: setup pyc
	$(BIN)/tau run examples/quickstart --target local
	$(BIN)/tau run verify aks-gpu-quickstart

# What a cluster would receive for the quickstart (offline, against example profiles).
render: setup
	$(BIN)/tau run validate examples/quickstart --profiles examples/profiles.yaml
	$(BIN)/tau run examples/quickstart --dry-run --profiles examples/profiles.yaml

# pytest exits 5 when it collected nothing: say so, and fail.
test: setup
	@$(BIN)/python -m pytest -q -m "not e2e"; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests"; fi; exit $$rc

# A real control plane (etcd, kube-apiserver, controller-manager, scheduler, KWOK), built once
# from the upstream Go modules into ~/.cache/taugrid/controlplane.
controlplane:
	bash e2e/controlplane/build.sh

e2e: setup controlplane
	@$(BIN)/python -m pytest -q -m e2e; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no e2e tests"; fi; exit $$rc

# mypy and import-linter see the folders under their import names through symlinks (the
# package-dir mapping); the import contracts are in pyproject.toml ([tool.importlinter]).
lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	@mkdir -p .typecheck/taugrid && for d in api runs cli components infra; do ln -sfn ../../$$d .typecheck/taugrid/$$d; done; ln -sfn ../runlib/tau_run.py .typecheck/tau_run.py
	$(BIN)/mypy -p taugrid.api -p taugrid.runs -p taugrid.cli -p taugrid.components -p taugrid.infra
	PYTHONPATH=.typecheck $(BIN)/lint-imports --no-cache

fmt: setup
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: setup pyc
	$(BIN)/python bench/bench_cli.py
	$(BIN)/python bench/bench_local.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
