# The two commands of the README's quick start:
#   make gate   set up a virtual environment with rocmcheck and torch, and run `rocmcheck gate` on the default device
#   make test   the same environment plus the test tools and the hf extra, then the test suite
# The documentation: make docs   the site under docs/ (mkdocs.yml) into site/, --strict (the docs extra)
# And for a developer: make test-fast   the tests that start no process (no probe children, no packaging,
# fleet or simulated-GPU build, no whole-process timing): -m "not slow and not children"; a test that
# starts a process unmarked fails there (conftest.py). 33 s on 2 idle cores, up to 2 min loaded (README).
# Each has its stamp: $(VENV)/.installed-gate (rocmcheck and torch) and $(VENV)/.installed (all of it,
# what a developer sets up), so `make gate` then `make test` in one folder adds what the tests need.
# torch: one already importable in the environment is reused; otherwise the build that fits the
# host is installed (AMD GPU: PyTorch's ROCm wheels; NVIDIA GPU: the default CUDA wheels; no GPU:
# $(TORCH_NO_GPU)), and the choice is printed with its reason. Overrides always win:
#   make gate TORCH='torch==2.9.1'                          a version for any host
#   make gate TORCH_INDEX=https://download.pytorch.org/whl/rocm6.4   another wheel index
#   make gate VENV_FLAGS=--system-site-packages             reuse the PyTorch you already have
PYTHON ?= python3
VENV ?= .venv
VENV_FLAGS ?=
TORCH ?=
TORCH_INDEX ?=
TORCH_NO_GPU ?= torch==2.13.0
# where a host without GPU gets it: empty is pip's configured index (offline CI's local wheels);
# TORCH_NO_GPU_INDEX=https://download.pytorch.org/whl/cpu takes PyTorch's CPU-only wheels, not PyPI's CUDA ones
TORCH_NO_GPU_INDEX ?=
PYTEST_ARGS ?=
# pytest-xdist workers; loadscope keeps each module's shared fixtures (a venv, a recorded run) in one worker.
# --max-worker-restart=0: a worker that dies ends the run at once, naming its test (with loadscope, a
# replaced worker was seen to leave the run waiting forever). 3 on the project's 2-core machine: many tests
# wait on their children (hangs to their timeout, kills, installs), and a third worker fills those waits;
# pytest took 754-809 s with 3 (five fresh-clone runs, 2026-11-28; 859 s and 926 s in two later ones, every test
# slower alike), 916 s and 932 s with 2 the same day.
# Tests that time work run alone whatever the count (`alone`, conftest.MachineShare).
PYTEST_WORKERS ?= 3
BIN := $(VENV)/bin

PYTEST_FAST_WORKERS ?= 2

.PHONY: gate test test-fast docs simgpu-test clean compat cuda-build-test slurm-test npd-test hardware

$(VENV)/.installed-gate: pyproject.toml
	$(PYTHON) -m venv $(VENV_FLAGS) $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	@if $(BIN)/python -c "import torch" 2>/dev/null; then \
		echo "rocmcheck: reusing torch $$($(BIN)/python -c 'import torch; print(torch.__version__)'), already importable here"; \
	else \
		args=$$($(BIN)/python -m rocmcheck.host.hostgpu --no-gpu-requirement "$(TORCH_NO_GPU)" \
			--no-gpu-index "$(TORCH_NO_GPU_INDEX)" \
			$(if $(TORCH),--requirement "$(TORCH)") $(if $(TORCH_INDEX),--index "$(TORCH_INDEX)")) && \
		echo "$(BIN)/python -m pip install -q $$args" && $(BIN)/python -m pip install -q $$args; \
	fi
	$(BIN)/python -m pip install -q -e .
	touch $@

# --no-compile: the test extras' bytecode is written as the tests first import them (where PYTHONDONTWRITEBYTECODE is
# set, never: measured there, compiling them took `import peft, accelerate, transformers...` only from 5.7 s to
# 5.2-5.4 s); transformers alone is thousands of modules the suite never imports (23 s -> 10 s for this step on the
# 2-core machine). The gate's install compiles.
$(VENV)/.installed: $(VENV)/.installed-gate
	$(BIN)/python -m pip install -q --no-compile -e ".[test,hf]"
	touch $@

gate: $(VENV)/.installed-gate
	$(BIN)/rocmcheck gate

test: $(VENV)/.installed
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadscope --max-worker-restart=0 $(PYTEST_ARGS)

# the fast tier: what needs no real process; `make test` (and CI) still runs everything
test-fast: $(VENV)/.installed
	ROCMCHECK_TEST_NO_CHILDREN=1 $(BIN)/python -m pytest -q -m "not slow and not children" \
		--hypothesis-profile=rocmcheck-fast -n $(PYTEST_FAST_WORKERS) --dist loadscope --max-worker-restart=0 $(PYTEST_ARGS)

# The documentation site (mkdocs.yml) into site/, strict: a broken link or anchor, a page outside the nav or a
# generated table that fails stops the build. The docs extra (MkDocs, Material) gets its own stamp.
$(VENV)/.installed-docs: $(VENV)/.installed-gate
	$(BIN)/python -m pip install -q -e ".[docs]"
	touch $@

docs: $(VENV)/.installed-docs
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --clean

# the whole gate on two simulated GPUs (rocmcheck/simgpu, built on first use): 24 s on an idle 2-core machine; CI, short of time,
# runs the fault tests and a narrowed gate (tests/test_simgpu.py)
simgpu-test: $(VENV)/.installed
	$(BIN)/rocmcheck gate --inject simgpu:2
	$(BIN)/python -m pytest -q tests/test_simgpu.py

clean:
	rm -rf $(VENV) build dist site *.egg-info

# The torch compatibility matrix (scripts/compat_matrix.py): a cached venv per supported torch, several GB
# each, so it is not part of `make test` or CI. COMPAT_ARGS='--torch 2.2.2' narrows it.
COMPAT_ARGS ?=
compat: $(VENV)/.installed
	$(BIN)/python scripts/compat_matrix.py $(COMPAT_ARGS)

# A CUDA build of torch without a GPU (PyPI's Linux torch: several GB, so not in CI): the CUDA-build facts
# rocmcheck reports and relies on, held against torch's own answers (tests/test_cuda_build.py).
CUDA_TORCH ?= torch==2.14.1
CUDA_VENV ?= .venv-cuda
$(CUDA_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(CUDA_VENV)
	$(CUDA_VENV)/bin/python -m pip install -q --upgrade pip
	$(CUDA_VENV)/bin/python -m pip install -q "$(CUDA_TORCH)" -e ".[test]"
	touch $@

cuda-build-test: $(CUDA_VENV)/.installed
	$(CUDA_VENV)/bin/python -m pytest -q -p no:cacheprovider tests/test_cuda_build.py

# The Slurm prolog recipe in a real one-node Slurm on localhost (tests/test_slurm.py): installs
# Debian's slurm-wlm and munge (root, apt), starts munged, slurmctld and slurmd under a temporary
# folder, runs the recipe's cases and the docs' Slurm commands, stops the daemons by PID.
# About 2 min on 2 loaded cores, plus the install; not in CI (root daemons, and CI's time goes to
# `make test`). ROCMCHECK_NHC_SOURCE=<a checkout of NHC> adds NHC itself (two tests).
slurm-test: $(VENV)/.installed
	@PATH="$$PATH:/usr/sbin" command -v slurmctld >/dev/null && PATH="$$PATH:/usr/sbin" command -v munged >/dev/null || \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurm-wlm munge; }
	ROCMCHECK_SLURM_TEST=1 $(BIN)/python -m pytest -q -s -p no:cacheprovider tests/test_slurm.py

# The real node-problem-detector runs the gate as docs/recipes/npd-rocmcheck.json configures it (tests/test_npd_real.py,
# about 2 minutes): ROCMCHECK_NPD names its binary, built from NPD's source (docs/deployment.md says how; NPD is in
# no package registry this project uses). The committed recipe's own paths need root (a private mount namespace).
npd-test: $(VENV)/.installed
	@test -n "$(ROCMCHECK_NPD)" || { echo "make npd-test: set ROCMCHECK_NPD to a node-problem-detector binary" \
		"(ROCMCHECK_NPD=/path/to/node-problem-detector make npd-test; docs/deployment.md says how to build one)" >&2; exit 2; }
	@test -x "$(ROCMCHECK_NPD)" || { echo "make npd-test: ROCMCHECK_NPD=$(ROCMCHECK_NPD) is not an executable file" >&2; exit 2; }
	ROCMCHECK_NPD="$(ROCMCHECK_NPD)" $(BIN)/python -m pytest -q -s -p no:cacheprovider tests/test_npd_real.py

# On a machine with real GPUs, in at most 8 minutes (scripts/hardware.py --plan lists the steps): the gate twice,
# three drills on GPU 0, the level-1 run on every GPU and make cuda-build-test's tests with the machine's own
# torch, each under its own deadline, kept as reports/hardware/<device>-<date>-<step>.json and .md with a
# summary. Refused in one line where torch sees no GPU or faults are injected: a simulated GPU never writes there.
hardware: $(VENV)/.installed
	@$(BIN)/python scripts/hardware.py
