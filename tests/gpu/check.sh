#!/usr/bin/env bash
# GPU check for a lent CUDA machine (< 8 minutes): builds nothing, downloads nothing.
# Needs a Python with torch (CUDA), vllm, transformers, tokenizers and pillow; optional
# faster-qwen3-tts + qwen-tts-hf and JOYDUPLEX_TTS_MODEL for the TTS figures.
#   bash tests/gpu/check.sh [python] [out.json]
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON="${1:-${PYTHON:-python3}}"
OUT="${2:-${OUT:-gpu-check.json}}"
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false VLLM_LOGGING_LEVEL="${VLLM_LOGGING_LEVEL:-WARNING}"
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv || true
exec timeout 470 "$PYTHON" tests/gpu/check_gpu.py --out "$OUT" --budget-s 450
