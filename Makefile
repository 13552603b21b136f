# The two commands of the README's quick start:
#   make gate   set up a virtual environment and run `rocmcheck gate` on the default device
#   make test   set up the same environment with the test tools and run the test suite
# Already have PyTorch for your GPU (a ROCm or CUDA build)? Reuse it:
#   make gate VENV_FLAGS=--system-site-packages
PYTHON ?= python3
VENV ?= .venv
VENV_FLAGS ?=
TORCH ?= torch==2.13.0
PYTEST_ARGS ?=
BIN := $(VENV)/bin

.PHONY: gate test clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV_FLAGS) $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install -q "$(TORCH)"
	$(BIN)/python -m pip install -q -e ".[test,hf]"
	touch $@

gate: $(VENV)/.installed
	$(BIN)/rocmcheck gate

test: $(VENV)/.installed
	$(BIN)/python -m pytest $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) build dist *.egg-info
