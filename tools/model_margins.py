"""How far every model-output assertion stays from its threshold, on this CPU and on an
x86-64 CPU without AVX-512. Reports figures; fails when a margin is under what is kept.

    .venv/bin/python tools/model_margins.py [--cpu both|here|avx2] [--out FILE.json]

The tests marked `model_output` (Silero, Smart Turn and Whisper on generated and real
speech, replayed sans-IO) run twice: here, and under `qemu-x86_64 -cpu max`, QEMU's
emulation of an x86-64 CPU with AVX2 and no AVX-512 (`make system-deps` installs
qemu-user). Each records its margins (tests/model_margins.py); the table puts the two
runs side by side and the exit status is 1 when either run has a margin under what
tests/model_margins.py keeps (0.15 of a probability, a frame of a boundary), or a test
failed.

Then the figures that sit on a threshold by nature, reported, never asserted: the
end-of-turn score of sentences near 0.5, and the real speaker's first pause, which the
model hears as finished.

Under emulation everything runs 20-60x slower: about 20 minutes on two cores.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.model_margins import REPORT_ENV, REQUIRED  # noqa: E402

#: sentences whose end-of-turn score is near 0.5: what the model makes of them, per CPU
BOUNDARY_SENTENCES = ("I want to know what colour this is.", "Can you see my hand?")


def _emulator() -> list[str]:
    if platform.machine() != "x86_64":
        raise SystemExit(f"emulating an AVX2 CPU needs an x86-64 host, not {platform.machine()}")
    qemu = shutil.which("qemu-x86_64")
    if qemu is None:
        raise SystemExit("qemu-x86_64 is missing: `sudo make system-deps` installs qemu-user")
    return [qemu, "-cpu", "max"]


def _cpu_here() -> str:
    """This machine's CPU model and whether it has AVX-512 (from /proc/cpuinfo)."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.machine()
    names = [ln.split(":", 1)[1].strip() for ln in info.splitlines() if ln.startswith("model name")]
    avx512 = "with" if " avx512f" in info else "without"
    return f"{names[0] if names else platform.machine()}, {avx512} AVX-512"


def _run_tests(prefix: list[str], report: Path) -> tuple[int, float]:
    env = {**os.environ, REPORT_ENV: str(report), "PYTHONPATH": str(ROOT)}
    command = [*prefix, sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    command += ["-m", "model_output", "tests"]
    started = time.monotonic()
    done = subprocess.run(command, cwd=ROOT, env=env, check=False)
    return done.returncode, time.monotonic() - started


def figures() -> dict[str, float]:
    """The boundary cases' scores on the CPU this runs on."""
    import anyio
    import numpy as np

    from backends.cpu.smart_turn import SmartTurn
    from tests.backends.cpu_audio import HUMAN_SPEECH_PAUSES, human_speech, quiet_noise, speech

    async def score() -> dict[str, float]:
        out: dict[str, float] = {}
        async with SmartTurn() as turn:
            for text in BOUNDARY_SENTENCES:
                pcm = np.concatenate([quiet_noise(0.5, rms=0.0005, seed=4), speech(text)])
                pcm = np.concatenate([pcm, quiet_noise(0.3, rms=0.0005, seed=5)])
                out[f"Smart Turn after {text!r} (0.3 s of quiet)"] = turn.predict_sync(pcm)
            try:
                voice = human_speech()
            except BaseException:  # pytest's skip when the recording is absent
                return out
            end = round((HUMAN_SPEECH_PAUSES[0][0] + 0.3) * 16_000)
            out["Smart Turn 0.3 s into JFK's pause after 'my fellow Americans,'"] = (
                turn.predict_sync(voice[:end])
            )
        return out

    result: dict[str, float] = anyio.run(score)
    return result


def _figures_on(prefix: list[str]) -> dict[str, float]:
    command = [*prefix, sys.executable, str(Path(__file__).resolve()), "--figures-only"]
    done = subprocess.run(
        command,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        print(done.stderr[-2000:], file=sys.stderr)
        return {}
    parsed: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return parsed


def _key(row: dict) -> tuple[str, str]:  # type: ignore[type-arg]
    return row["test"].split("::", 1)[-1], row["what"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu", choices=("both", "here", "avx2"), default="both")
    parser.add_argument("--out", type=Path, help="write both runs' rows and figures as JSON")
    parser.add_argument("--figures-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.figures_only:
        print(json.dumps(figures()))
        return
    cpus = (
        {"here": [], "avx2": _emulator()}
        if args.cpu == "both"
        else {args.cpu: [] if args.cpu == "here" else _emulator()}
    )
    rows: dict[str, list[dict]] = {}  # type: ignore[type-arg]
    status: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as work:
        for name, prefix in cpus.items():
            report = Path(work) / f"{name}.json"
            code, seconds = _run_tests(prefix, report)
            rows[name] = json.loads(report.read_text()) if report.is_file() else []
            status[name] = {"pytest_exit": code, "seconds": round(seconds)}
    found = {name: {_key(r): r for r in rs} for name, rs in rows.items()}

    def smallest_share(key: tuple[str, str]) -> float:
        seen = [found[n][key] for n in found if key in found[n]]
        return min(r["margin"] / REQUIRED[r["unit"]] for r in seen)

    keys = sorted({k for rs in found.values() for k in rs}, key=smallest_share)
    print(f"\n{'margin':>8}  {'unit':<11}  " + "  ".join(f"{n:>8}" for n in found) + "  what")
    under = 0
    table = []
    for key in keys:
        seen = [found[n].get(key) for n in found]
        margins = [r["margin"] for r in seen if r]
        deciding = [r["deciding"] for r in seen if r and r.get("deciding") is not None]
        unit = next(r["unit"] for r in seen if r)
        smallest = min(margins)
        kept = smallest >= REQUIRED[unit] or (
            len(deciding) == len(margins) and min(deciding) >= REQUIRED["probability"]
        )
        under += not kept or len(margins) < len(found)
        values = "  ".join(f"{r['value']:8.3f}" if r else f"{'-':>8}" for r in seen)
        flag = "" if kept else "  UNDER"
        print(f"{smallest:+8.3f}  {unit:<11}  {values}  {key[1]} [{key[0]}]{flag}")
        table.append(
            {
                "test": key[0],
                "what": key[1],
                "unit": unit,
                "smallest": smallest,
                "kept": kept,
                **{n: found[n].get(key) for n in found},
            }
        )
    print("\nfigures (on a threshold by nature: reported, not asserted)")
    shown = {name: _figures_on(prefix) for name, prefix in cpus.items()}
    for what in sorted({w for f in shown.values() for w in f}):
        print(
            "  "
            + "  ".join(f"{n} {shown[n].get(what, float('nan')):.3f}" for n in shown)
            + f"  {what}"
        )
    print(f"\nruns: {status}; {under} margins under what is kept or missing from a run")
    if args.out:
        args.out.write_text(
            json.dumps(
                {
                    "cpu": _cpu_here(),
                    "runs": status,
                    "rows": table,
                    "figures": shown,
                },
                indent=1,
            )
        )
    failed = any(s["pytest_exit"] != 0 for s in status.values())
    sys.exit(1 if under or failed else 0)


if __name__ == "__main__":
    main()
