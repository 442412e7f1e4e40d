"""Model backends behind the stage protocols of `backends.base` (Vad, Asr, Vlm, Tts):
`cpu` (the embedded default: small real models shipped inside packages), `scripted`
(deterministic and programmable, for tests and client developers) and `gpu` (vLLM and
torch with CUDA Graphs). Backends depend only on `spec`; the runtime reaches a concrete
backend by name through the registry, so importing this package loads no model library.
"""

from __future__ import annotations

__all__: list[str] = []
