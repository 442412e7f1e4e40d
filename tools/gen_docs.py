"""Regenerate the documents in docs/ from spec/ (run by `make docs`), and the generated
spans of the hand-written documents (the behaviour range between its markers)."""

from __future__ import annotations

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from spec.docs_index import DOCUMENTS, MARKED_DOCUMENTS  # noqa: E402


def main() -> None:
    for rel, render in DOCUMENTS.items():
        path = ROOT / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render())
        print(f"wrote {rel}")
    for rel, refresh in MARKED_DOCUMENTS.items():
        path = ROOT / rel
        text = path.read_text()
        fresh = refresh(text)
        if fresh != text:
            path.write_text(fresh)
            print(f"updated {rel}")
        else:
            print(f"unchanged {rel}")


if __name__ == "__main__":
    main()
