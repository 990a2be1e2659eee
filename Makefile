# The two commands a user needs are `make demo` and `make test`; both set the machine up first.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.setup-done
GEN_DIR := railfabric/v1
PROTOS := $(wildcard proto/railfabric/v1/*.proto)

.PHONY: setup demo test test-deep test-stress lint typecheck pytest proto proto-check clean p4 \
	p4-constants p4-constants-check

setup: $(STAMP)

$(STAMP): pyproject.toml scripts/setup.sh
	./scripts/setup.sh
	touch $@

# The main job: the most complete real thing railfabric runs today. `make demo
# FABRIC=examples/lab-6rail.yaml` runs it on the largest fabric whose every verdict passes on
# 2 cores (6 rails, 14 switches); FABRIC=examples/lab-8rail.yaml on the StarPulse shape (8
# rails, 18 switches: it runs, and its failover's remote bound is crossed there).
FABRIC ?= examples/lab-2rail.yaml
demo: setup
	mkdir -p build && $(PY) -m mininet_labs run $(FABRIC) --scenario all --json build/lab-report.json

test: setup proto-check p4-constants-check lint typecheck pytest

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: setup
	$(VENV)/bin/mypy

# The unit tier is pure CPU: two workers (pytest-xdist) take ~2 minutes off CI; the tiers
# with processes, namespaces and timings run one test at a time, as they always have.
pytest: setup
	$(VENV)/bin/pytest -n 2 tests/unit
	$(VENV)/bin/pytest --ignore=tests/unit

# The decision core's model-based tests at ten times CI's size (20,000 examples of 100 steps).
test-deep: setup
	HYPOTHESIS_PROFILE=deep $(VENV)/bin/pytest -p no:cacheprovider tests/unit/core/test_machine_model.py

# `make test` 3 times in a row beside two busy loops (~30 minutes): a test that needs an idle
# machine fails here. The loops are always killed, and any failed run fails the target.
# (Not $(MAKE) in the recipe itself: that would run it, busy loops and all, under `make -n`.)
STRESS_RUNS := 3
STRESS_MAKE = $(MAKE) --no-print-directory
test-stress: setup
	@yes > /dev/null & hog1=$$!; yes > /dev/null & hog2=$$!; \
	trap 'kill $$hog1 $$hog2 2>/dev/null; wait $$hog1 $$hog2 2>/dev/null' EXIT; \
	trap 'exit 130' INT TERM; \
	failed=0; \
	for run in $$(seq 1 $(STRESS_RUNS)); do \
	  echo "test-stress: run $$run of $(STRESS_RUNS) beside busy loops $$hog1 $$hog2"; \
	  $(STRESS_MAKE) test || { failed=$$((failed + 1)); echo "test-stress: run $$run FAILED" >&2; }; \
	done; \
	if [ $$failed -ne 0 ]; then echo "test-stress: $$failed of $(STRESS_RUNS) runs failed" >&2; exit 1; fi; \
	echo "test-stress: all $(STRESS_RUNS) runs passed"

# Regenerate the railfabric.v1 stubs from proto/ (committed; proto-check keeps them honest).
proto: setup
	PATH=$(abspath $(VENV))/bin:$$PATH $(PY) -m grpc_tools.protoc -I proto \
	  --python_out=. --grpc_python_out=. --mypy_out=. --mypy_grpc_out=. $(PROTOS)

proto-check: setup
	@tmp=$$(mktemp -d) && trap 'rm -rf $$tmp' EXIT && \
	PATH=$(abspath $(VENV))/bin:$$PATH $(PY) -m grpc_tools.protoc -I proto \
	  --python_out=$$tmp --grpc_python_out=$$tmp --mypy_out=$$tmp --mypy_grpc_out=$$tmp $(PROTOS) && \
	for f in $$(cd $$tmp && find . -type f | sort); do \
	  cmp -s "$$tmp/$$f" "$$f" || { echo "proto-check: $$f is stale or missing; run 'make proto' and commit" >&2; exit 1; }; \
	done && \
	for f in $(GEN_DIR)/*_pb2*.py*; do \
	  [ -f "$$tmp/$$f" ] || { echo "proto-check: $$f has no .proto source; delete it" >&2; exit 1; }; \
	done && echo "proto-check: railfabric.v1 stubs are up to date"

# Compile p4/fabric.p4 with p4c-bm2-ss (when on PATH) and check p4/fabric.p4info.txt against it.
p4: setup
	$(PY) -m softswitch.p4build
	@# The wheel ships the bmv2 JSON when it exists at build time (railfabric/p4info.py).
	@if [ -f build/p4/fabric.json ]; then cp build/p4/fabric.json railfabric/p4/fabric.json; fi

# Regenerate railfabric/fabric_p4.py, the P4Info names as constants (committed; the check keeps
# it honest against p4/fabric.p4info.txt).
p4-constants: setup
	$(PY) -m railfabric.p4gen --write

p4-constants-check: setup
	$(PY) -m railfabric.p4gen --check

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache build *.egg-info railfabric/p4/fabric.json
