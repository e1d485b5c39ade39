# One-command set-up on a fresh machine: `make demo` runs the demo, `make test` runs the tests.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# A CPU build of torch: a plain `pip install torch` may pull a multi-GB CUDA build.
TORCH_PIN ?= torch==2.13.0
# Spec-Bench questions for `make bench` (the file is not part of this repository).
BENCH_QUESTIONS ?= ../shared/data/spec_bench/question.jsonl
STAMP := $(VENV)/.oneiro-installed

.PHONY: setup models demo test lint bench clean

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q "$(TORCH_PIN)"
	$(PIP) install -q -e ".[dev]"
	touch $(STAMP)

setup: $(STAMP)

models: setup
	$(PY) -m oneiro_hf.reference_models fetch smollm2-135m-instruct

demo: models
	$(PY) examples/demo.py

test: models
	$(PY) -m pytest -q tests

lint: setup
	$(VENV)/bin/ruff check oneiro_hf tests examples

bench: models
	$(PY) -m oneiro_hf.bench --questions $(BENCH_QUESTIONS) --per-category 3 --max-new-tokens 128 --out runs/bench

clean:
	rm -rf $(VENV) runs .pytest_cache
