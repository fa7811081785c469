# Two commands do all set-up on a fresh machine: `make run` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The CPU build of torch that lies on this kind of machine's disk; a GPU rig installs its own torch first.
TORCH_SPEC ?= torch==2.13.0
SCRATCH ?= scratch

.PHONY: install run test check bench clean

$(BIN)/vaemem: pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install -q "$(TORCH_SPEC)"
	$(BIN)/pip install -q -e ".[measure,test]"
	touch $(BIN)/vaemem

install: $(BIN)/vaemem

# The main job on the embedded default: a small real CPU sweep, fit, report and one plot, under $(SCRATCH)/.
run: install
	$(BIN)/python -m vaemem.demo --out $(SCRATCH)

# Two worker processes (pytest-xdist): most of the suite's time is children importing torch and dry runs on one
# core each, so two workers cut it by a quarter on a 2-core machine (5.6 min serial, 4.3 min in two here, when the
# suite was smaller; 8.6 min in two on a clean clone of 2026-12-07). Fixed at two, not one per core: the measuring
# tests start children of their own.
test: install
	$(BIN)/python -m pytest -q -n 2
	$(MAKE) check

# The CI reproducibility check: the committed coefficient file must be re-derivable from the committed data.
check: install
	$(BIN)/vaemem fit --check

bench: install
	$(BIN)/python benchmarks/launcher.py
	$(BIN)/python benchmarks/fit_speed.py
	$(BIN)/python benchmarks/estimate_speed.py

clean:
	rm -rf $(SCRATCH) .pytest_cache
