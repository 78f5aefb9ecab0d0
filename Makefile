# The two README commands: `make train` and `make test`. Each creates .venv when missing.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.unilab-installed
export MUJOCO_GL ?= egl
# Sim processes want their cores for MuJoCo; torch sets its own threads per process.
export OMP_NUM_THREADS ?= 1

.PHONY: install train test test-slow test-lerobot lint format bench clean

$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP)

# Main job: train the default task with its best preset (then export and record, as they land).
train: install
	$(BIN)/unilab train

test: install
	$(BIN)/python -m pytest -q

test-slow: install
	$(BIN)/python -m pytest -q -m slow

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/python tools/check_layers.py

format: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

bench: install
	$(BIN)/unilab bench all

clean:
	rm -rf build *.egg-info .pytest_cache .mypy_cache .ruff_cache

LEROBOT_PYTHON ?= python3.11
LEROBOT_VENV   ?= .venv-lerobot
LEROBOT_BIN    := $(LEROBOT_VENV)/bin
LEROBOT_STAMP  := $(LEROBOT_VENV)/.unilab-installed

# lerobot 0.4.4 pins torch<2.11: its own environment (docs/decisions/0008), ~4.4 GB download.
$(LEROBOT_STAMP): requirements-lerobot.txt pyproject.toml
	@command -v ffmpeg >/dev/null || (apt-get update -qq && apt-get install -y -qq ffmpeg)
	@test -x $(LEROBOT_BIN)/python || $(LEROBOT_PYTHON) -m venv $(LEROBOT_VENV)
	$(LEROBOT_BIN)/python -m pip install -q --upgrade pip
	$(LEROBOT_BIN)/python -m pip install -q -r requirements-lerobot.txt
	$(LEROBOT_BIN)/python -m pip install -q --no-deps -e .
	@touch $(LEROBOT_STAMP)

test-lerobot: $(LEROBOT_STAMP)
	$(LEROBOT_BIN)/python -m pytest -q -m lerobot tests/data_lerobot
