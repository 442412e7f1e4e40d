#!/usr/bin/env bash
# Run on the CPU machine before the one `device` call of the GPU check.
#
# The lent GPU machine has torch, transformers and onnxruntime but none of the server's
# own packages, and it cannot fetch anything. This downloads, into .whl/ (ignored by
# git), the cp312 manylinux wheels the check needs that its image lacks: the roots
# below, pinned, plus every dependency they declare that the image does not list
# (tests/gpu/device_image_packages.txt), one version each, without their own
# dependencies' extras. It checks that they fit well under the 64 MiB a call carries
# (with the working tree) and prints the exact `device` run to make.
#
#   bash tests/gpu/prepare_device.sh [python]
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON="${1:-${PYTHON:-python3}}"
DEST=.whl
LIMIT_MIB=40  # of the 64 MiB a call carries: the working tree needs the rest

ROOTS=(
  # the server and its client (pyproject's core dependencies the image lacks)
  msgspec==0.23.0 transitions==0.9.3 starlette==1.10.0 uvicorn==0.54.0 websockets==17.4
  # Silero's pinned ONNX file (server VAD); its declared torch dependency is on the image
  silero-vad==6.2.3
  # Qwen3-TTS modeling code and its CUDA Graph runtime
  qwen-tts-hf==0.1.1.post1 faster-qwen3-tts==0.5.4 librosa==0.11.0 soundfile==0.14.0 sox==1.4.1
)
# declared but never imported on the check's path: qwen-tts-hf's web demo
SKIP="gradio"

rm -rf "$DEST" && mkdir -p "$DEST"
"$PYTHON" - "$DEST" "$SKIP" "${ROOTS[@]}" <<'PY'
import re, subprocess, sys, zipfile
from pathlib import Path

from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

dest, skip, roots = Path(sys.argv[1]), set(sys.argv[2].split()), sys.argv[3:]
listed = Path("tests/gpu/device_image_packages.txt").read_text().split("\n")
image = {canonicalize_name(n) for line in listed if not line.startswith("#") for n in line.split()}
env = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
       "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
       "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": ""}
platforms = [f"--platform={p}" for p in ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64",
             "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64", "any")]

def download(spec: str) -> Path:
    before = set(dest.iterdir())
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    "--python-version=3.12", "--implementation=cp", *platforms, "-d", str(dest), spec],
                   check=True)
    new = set(dest.iterdir()) - before
    return next(iter(new)) if new else next(p for p in dest.iterdir()
                                             if canonicalize_name(p.name.split("-")[0]) == canonicalize_name(Requirement(spec).name))

queue, seen = list(roots), set()
while queue:
    spec = queue.pop(0)
    name = canonicalize_name(Requirement(spec).name)
    if name in seen:
        continue
    seen.add(name)
    wheel = download(spec)
    print(f"  {wheel.name}")
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        for line in z.read(meta).decode().splitlines():
            if not line.startswith("Requires-Dist:"):
                continue
            req = Requirement(line.split(":", 1)[1].strip())
            if req.marker is not None and not req.marker.evaluate(env):
                continue  # an extra, another platform or Python
            dep = canonicalize_name(req.name)
            if dep in image or dep in seen or dep in skip:
                continue
            queue.append(f"{req.name}{req.specifier}")
PY
size=$(du -sm "$DEST" | cut -f1)
echo "wheels in $DEST: $(ls "$DEST" | wc -l) files, ${size} MiB"
if [ "$size" -gt "$LIMIT_MIB" ]; then
  echo "too large: ${size} MiB > ${LIMIT_MIB} MiB" >&2
  exit 1
fi
cat <<RUN
Make this one device call (run, not shell), carry [".whl"], timeout_s 520:
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:\$PWD PYTHONUNBUFFERED=1 || exit; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; python3 tests/gpu/check_device.py --out \$OUT/gpu-device-check.json --budget-s 450 2>&1 | tee \$OUT/gpu-device-check.log
RUN
