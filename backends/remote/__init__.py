"""The remote backend: the ASR, VLM and TTS stages as HTTP clients of OpenAI-compatible
servers (vLLM for Qwen3-ASR and JoyAI, vLLM-Omni for Qwen3-TTS), several replicas per
stage with client-side balancing and health. HTTP only (httpx): no torch, no vLLM.
See docs/deploy.md.
"""

from __future__ import annotations

__all__: list[str] = []
