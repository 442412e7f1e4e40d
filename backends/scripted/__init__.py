"""The scripted backend: deterministic, programmable latencies, transcripts, replies,
silence decisions, failures and parked requests. The oracle backend for runtime,
transport and benchmark tests, and a stand-in for client developers.

    script.py    `Script`: the programmable behaviour and the records of requests/aborts
    stages.py    ScriptedVad / ScriptedAsr / ScriptedVlm / ScriptedTts
    backend.py   `create_backend` (registry entry "scripted") and `script_of`
"""

from __future__ import annotations

__all__: list[str] = []
