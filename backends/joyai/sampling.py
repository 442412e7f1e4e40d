"""JoyAI's sampling settings and default system prompt, for every backend that serves it.

The values follow upstream's JoyAI stage (temperature 0.8, top_p 0.9, top_k 40,
repetition 1.1, presence 1.5, a 256-token reply). They are plain vLLM `SamplingParams`
names, so the in-process engines build their `Sampling` from them and the remote stage
sends them as the chat-completions request's sampling fields.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Final

__all__ = ["JOYAI_SAMPLING_PARAMS", "JOYAI_SYSTEM_PROMPT"]

JOYAI_SAMPLING_PARAMS: Final = MappingProxyType(
    {
        "max_tokens": 256,
        "temperature": 0.8,
        "top_p": 0.9,
        "top_k": 40,
        "repetition_penalty": 1.1,
        "presence_penalty": 1.5,
    }
)
JOYAI_SYSTEM_PROMPT: Final = (
    "You are a real-time video streaming assistant observing a continuous camera feed. "
    "The last frame represents the current moment. Decide whether to stay silent, respond, "
    "or delegate."
)
