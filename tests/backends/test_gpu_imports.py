from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import json, sys
import backends.gpu.backend as gpu
from backends.registry import load_backend
for profile in ("speech", "camera"):
    backend = load_backend("gpu", profile=profile)
    assert backend.vlm is not None and backend.tts is not None
    assert (backend.asr is None) == (profile == "camera")
roots = ("torch", "vllm", "transformers", "PIL")
heavy = sorted(m for m in sys.modules if m.split(".")[0] in roots)
print(json.dumps(heavy))
"""


def test_building_the_gpu_backend_imports_no_torch_vllm_or_transformers() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


def test_every_gpu_module_imports_without_the_gpu_extra() -> None:
    modules = sorted(
        p.stem for p in (ROOT / "backends" / "gpu").glob("*.py") if p.stem != "__init__"
    )
    script = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module('backends.gpu.' + m)\n"
        "heavy = ('torch', 'vllm', 'transformers')\n"
        "assert not [m for m in sys.modules if m.split('.')[0] in heavy]\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
