# The two commands of the README. Both set up a project-local virtual environment (.venv)
# on first use; torch is pinned to the CPU wheel that these machines keep on disk, so set-up
# never pulls a multi-GB CUDA build.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
TORCH_PIN ?= torch==2.13.0
STAMP := $(VENV)/.npusan-installed

.PHONY: example test test-quick bench docs clean

CORE_SRC := $(filter-out %/_tables.h,$(wildcard src/npusan/analyzer/replay/csrc/*.[ch] src/npusan/analyzer/replay/csrc/*.py)) \
	src/npusan/trace_format/records.py src/npusan/analyzer/replay/core_codes.py

$(STAMP): pyproject.toml setup.py $(CORE_SRC)
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH_PIN)" numpy
	$(BIN)/python -m pip install -q -e ".[record,test,cluster]"
	touch $(STAMP)

## Record a small multi-stream PyTorch program on the simulated device, then analyze it.
example: $(STAMP)
	mkdir -p out
	$(BIN)/npusan record --backend sim -o out/example.npusan -- $(BIN)/python -m npusan.examples.multistream
	$(BIN)/npusan analyze out/example.npusan; rc=$$?; test $$rc -le 1

## Install what the tests need, lint (ruff) and type-check the public API (mypy; both set up
## in pyproject.toml), then run the tests (GPU tests skip without CUDA), one worker per CPU
## (pytest-xdist). The HTML report is checked in a real browser: Debian's chromium, installed
## here when missing.
test: $(STAMP)
	test -x /usr/bin/chromium || (apt-get update && apt-get install -y chromium)
	$(BIN)/ruff check
	$(BIN)/mypy
	$(BIN)/python -m pytest -q -n auto

## The same without the tests marked slow (each several seconds or more): a quick check.
test-quick: $(STAMP)
	$(BIN)/python -m pytest -q -n auto -m "not slow"

## The CPU benchmarks (analyzer, recorder, start-up hook); numbers are recorded in docs/benchmarks.md.
bench: $(STAMP)
	$(BIN)/python benchmarks/bench_analyzer.py
	$(BIN)/python benchmarks/bench_recorder.py
	$(BIN)/python benchmarks/bench_startup.py

## Regenerate docs/cli.md from the commands' own help (a test checks it is up to date).
docs: $(STAMP)
	$(BIN)/python scripts/cli_reference.py

clean:
	rm -rf $(VENV) out build *.egg-info src/*.egg-info
