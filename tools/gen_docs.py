"""Regenerate the documents in docs/ from spec/ (run by `make docs`)."""

from __future__ import annotations

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from spec.docs_index import DOCUMENTS  # noqa: E402


def main() -> None:
    for rel, render in DOCUMENTS.items():
        path = ROOT / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render())
        print(f"wrote {rel}")


if __name__ == "__main__":
    main()
