# The two commands a new user runs: `make demo` and `make test`. Both create .venv if missing.
# `make demo` installs only what the demo needs (the core: torch, numpy, matplotlib, ...);
# `make test` adds the test extra (transformers, datasets, lm-eval, the calibration tables).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# --no-compile: pip would compile every installed module to bytecode, one file at a time (about
# half of the install, mostly modules nothing imports); Python compiles a module the first time
# it is imported instead, and writes the bytecode for the next process, even where the
# environment sets PYTHONDONTWRITEBYTECODE (unexported below).
PIP := $(BIN)/python -m pip install --disable-pip-version-check --progress-bar on --no-compile
unexport PYTHONDONTWRITEBYTECODE
CORE_STAMP := $(VENV)/.installed-core
TEST_STAMP := $(VENV)/.installed-test

.PHONY: demo test bench clean

$(BIN)/python:
	@echo "creating the virtualenv $(VENV)"
	$(PYTHON) -m venv $(VENV)

$(CORE_STAMP): pyproject.toml | $(BIN)/python
	@echo "installing krakenlm and its core dependencies into $(VENV) (about a minute the first time)"
	$(PIP) -e .
	touch $@

$(TEST_STAMP): pyproject.toml | $(BIN)/python
	@echo "installing krakenlm with the test extra into $(VENV) (a few minutes the first time)"
	$(PIP) -e '.[test]'
	touch $@ $(CORE_STAMP)

demo: $(CORE_STAMP)
	$(BIN)/krakenlm demo

# Two worker processes (CI has two cores; tests run one torch thread each); a module's tests
# stay on one worker, so a module's fixtures are built once (tests/conftest.py groups them).
# `make test TEST_WORKERS=0` runs everything in this process.
TEST_WORKERS ?= 2

test: $(TEST_STAMP)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadscope

clean:
	rm -rf $(VENV) runs .pytest_cache
