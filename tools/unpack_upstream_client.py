"""Unpack vLLM-Omni's client package (`vllm_omni/clients/`) from its wheel.

    python tools/unpack_upstream_client.py WHEEL DEST

The resume tests run upstream's `DuplexClient` unchanged; it needs only websockets and
pybase64, so only `vllm_omni/clients/` is written under DEST (with an empty
`vllm_omni/__init__.py`, so `vllm_omni.clients.duplex` imports without vLLM-Omni's
server). The file appears last, so a half-written tree never looks complete to make.
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

PACKAGE = "vllm_omni/clients/"


def main(argv: list[str]) -> int:
    wheel, dest = Path(argv[0]), Path(argv[1])
    with zipfile.ZipFile(wheel) as archive:
        names = [n for n in archive.namelist() if n.startswith(PACKAGE) and n.endswith(".py")]
        if not names:
            print(f"{wheel} holds no {PACKAGE}", file=sys.stderr)
            return 1
        for name in sorted(names, key=lambda n: n.endswith("/duplex.py")):
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(archive.read(name))
    (dest / "vllm_omni" / "__init__.py").write_text("", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
