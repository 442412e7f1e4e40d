"""JoyAI's sampling settings, for every backend that serves it (its trained system prompt is
`backends.joyai.prompt.JOYAI_SYSTEM_PROMPT`).

The values follow upstream's JoyAI stage (temperature 0.8, top_p 0.9, top_k 40,
repetition 1.1, presence 1.5, a 256-token reply). They are plain vLLM `SamplingParams`
names, so the in-process engines build their `Sampling` from them and the remote stage
sends them as the chat-completions request's sampling fields.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Final

__all__ = ["JOYAI_SAMPLING_PARAMS"]

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
