"""Golden prompts: what JoyAI-VL-Interaction and Qwen3-ASR are sent for fixed session
traces, asserted as exact strings (text and image placement).

The layouts mirror the references that run these weights:
- JoyAI's reference server (jd-opensource/JoyAI-VL-Interaction, services/webinfer/): the
  trained system prompt as the system message; one user message per observation tick
  (the `[User Query ...]` header and question only on the tick the question arrives, the
  `<t seconds>` marker, the tick's frames), each followed by the model's normalized
  answer (`</response> text` or `</silence>`); content parts concatenated as the Qwen3-VL
  chat template renders them;
- vLLM-Omni's `asr_to_joyai` stage processor (the same single-tick layout) and its
  Qwen3-ASR stage, which leaves the language to the model.

They run in the default suite through the pure-Python renderer (`render_chatml`); the
slow test at the end sends the same traces through the VLM stage's real tokenizer path
(tiny Qwen3-VL checkpoint, as `make test-gpu-path` does) and skips cleanly without torch.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from backends.base import HistoryTurn, PromptContext
from backends.gpu.asr import build_asr_prompt
from backends.joyai.prompt import build_prompt
from spec.session_config import DEFAULT_INSTRUCTIONS

# The trained system prompt, spelled out here independently of the constant it checks
# (webinfer `DEFAULT_SYSTEM_PROMPT_EN`; vLLM-Omni joyvl `DEFAULT_SYSTEM_PROMPT`).
SYSTEM = """You are a real-time video streaming assistant observing a continuous camera \
feed frame by frame. The last frame represents the current moment.
## Action Format
At every inference step you MUST choose exactly one of the following three actions:
**Stay silent** — output ONLY:
</silence>
Choose this when nothing noteworthy has changed in the scene, no user query is pending, \
or there is nothing useful to say.
**Speak** — output the token followed by a concise reply:
</response> Your reply here.
Choose this when you observe something worth reporting or a significant state change, \
or when you can answer a user question based on available evidence.

**Delegate** — when a question is too hard or error-prone to answer reliably yourself, \
speak a brief note that you're delegating, then hand the question to the background solver:
</response> Brief note that you're delegating. </delegation> <the question>"""

IMG = "<|vision_start|><|image_pad|><|vision_end|>"
HEADER = "[User Query (IMPORTANT — follow this instruction)]"
F0, F1, F2, F3 = b"frame-0", b"frame-1", b"frame-2", b"frame-3"


def _words(text: str) -> int:
    return len(text.split())


def _render(context: PromptContext) -> tuple[str, tuple[bytes, ...]]:
    built = build_prompt(context, count_tokens=_words, budget_tokens=100_000, image_tokens=1)
    return built.text, built.images


# a spoken question with a frame: the tick the question arrives carries the header, its
# time marker and its frame (webinfer `_build_internal_user_message`; `asr_to_joyai`)
QUESTION = PromptContext(
    system=DEFAULT_INSTRUCTIONS, transcript="What is on the table?", frames=(F0,), time_s=3.0
)
QUESTION_TEXT = (
    f"<|im_start|>system\n{SYSTEM}<|im_end|>\n"
    f"<|im_start|>user\n{HEADER}\nWhat is on the table?<3.0 seconds>{IMG}<|im_end|>\n"
    "<|im_start|>assistant\n"
)

# camera-only ticks after it: the question stays on its own tick, the answer follows it as
# `</response> ...`, later ticks carry only their time marker and frame (webinfer history)
CAMERA = PromptContext(
    system=DEFAULT_INSTRUCTIONS,
    history=(HistoryTurn("user", "What is on the table?"), HistoryTurn("assistant", "A red cup.")),
    history_times_s=(3.0, None),
    history_frames=((F0,), ()),
    frames=(F1,),
    time_s=4.0,
)
CAMERA_TEXT = (
    f"<|im_start|>system\n{SYSTEM}<|im_end|>\n"
    f"<|im_start|>user\n{HEADER}\nWhat is on the table?<3.0 seconds>{IMG}<|im_end|>\n"
    "<|im_start|>assistant\n</response> A red cup.<|im_end|>\n"
    f"<|im_start|>user\n<4.0 seconds>{IMG}<|im_end|>\n"
    "<|im_start|>assistant\n"
)

# a silence: a tick the model stayed silent on is kept as `</silence>` (webinfer appends
# the normalized answer of every tick, silent ones included)
SILENCE = replace(
    CAMERA,
    history=(*CAMERA.history, HistoryTurn("user", ""), HistoryTurn("assistant", "")),
    history_times_s=(*CAMERA.history_times_s, 4.0, None),
    history_frames=(*CAMERA.history_frames, (F1,), ()),
    frames=(F2,),
    time_s=5.1,
)
SILENCE_TEXT = (
    f"<|im_start|>system\n{SYSTEM}<|im_end|>\n"
    f"<|im_start|>user\n{HEADER}\nWhat is on the table?<3.0 seconds>{IMG}<|im_end|>\n"
    "<|im_start|>assistant\n</response> A red cup.<|im_end|>\n"
    f"<|im_start|>user\n<4.0 seconds>{IMG}<|im_end|>\n"
    "<|im_start|>assistant\n</silence><|im_end|>\n"
    f"<|im_start|>user\n<5.1 seconds>{IMG}<|im_end|>\n"
    "<|im_start|>assistant\n"
)

# a barge-in: the cut reply stays as the prefix that was heard (B19), still marked as a
# response; the interrupting question opens its own tick with the header
BARGE_IN = PromptContext(
    system=DEFAULT_INSTRUCTIONS,
    history=(HistoryTurn("user", "Describe the room."), HistoryTurn("assistant", "It is a")),
    history_times_s=(1.0, None),
    history_frames=((F0,), ()),
    transcript="Wait, what colour is the cup?",
    frames=(F1,),
    time_s=2.5,
)
BARGE_IN_TEXT = (
    f"<|im_start|>system\n{SYSTEM}<|im_end|>\n"
    f"<|im_start|>user\n{HEADER}\nDescribe the room.<1.0 seconds>{IMG}<|im_end|>\n"
    "<|im_start|>assistant\n</response> It is a<|im_end|>\n"
    f"<|im_start|>user\n{HEADER}\nWait, what colour is the cup?<2.5 seconds>{IMG}<|im_end|>\n"
    "<|im_start|>assistant\n"
)

# a delegated question: only the spoken note is history (the question went to the
# background model, never to speech); the session's own instructions open the first user
# message (where webinfer puts its static prefix), never replacing the trained prompt
DELEGATED = PromptContext(
    system="Answer in one short sentence.",
    history=(
        HistoryTurn("user", "What year was this book printed?"),
        HistoryTurn("assistant", "Let me look that up."),
    ),
    history_times_s=(7.0, None),
    history_frames=((F2,), ()),
    frames=(F3,),
    time_s=8.0,
)
DELEGATED_TEXT = (
    f"<|im_start|>system\n{SYSTEM}<|im_end|>\n"
    "<|im_start|>user\nAnswer in one short sentence.\n\n"
    f"{HEADER}\nWhat year was this book printed?<7.0 seconds>{IMG}<|im_end|>\n"
    "<|im_start|>assistant\n</response> Let me look that up.<|im_end|>\n"
    f"<|im_start|>user\n<8.0 seconds>{IMG}<|im_end|>\n"
    "<|im_start|>assistant\n"
)

GOLDEN = {
    "question": (QUESTION, QUESTION_TEXT, (F0,)),
    "camera": (CAMERA, CAMERA_TEXT, (F0, F1)),
    "silence": (SILENCE, SILENCE_TEXT, (F0, F1, F2)),
    "barge_in": (BARGE_IN, BARGE_IN_TEXT, (F0, F1)),
    "delegated": (DELEGATED, DELEGATED_TEXT, (F2, F3)),
}


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_golden_vlm_prompt(name: str) -> None:
    context, text, frames = GOLDEN[name]
    rendered, images = _render(context)
    assert rendered == text
    # one placeholder per frame, the frames in placeholder order
    assert images == frames and rendered.count(IMG) == len(frames)


def test_golden_prompt_without_times_has_no_marker() -> None:
    """Where the session clock is unknown the tick carries no time marker (as
    `asr_to_joyai`, which has none)."""
    rendered, _ = _render(replace(QUESTION, time_s=None))
    assert f"{HEADER}\nWhat is on the table?{IMG}<|im_end|>" in rendered


def test_golden_asr_prompt() -> None:
    """Qwen3-ASR as vLLM-Omni's ASR stage runs it: empty system context, one audio
    placeholder, the assistant turn left open so the model names the language itself."""
    assert build_asr_prompt() == (
        "<|im_start|>system\n<|im_end|>\n"
        "<|im_start|>user\n<|audio_start|><|audio_pad|><|audio_end|><|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    # a session language (`audio.input.transcription.language`) is forced the trained way
    assert build_asr_prompt("zh").endswith("<|im_start|>assistant\nlanguage Chinese<asr_text>")


@pytest.fixture(scope="module")
def tiny_vlm(tmp_path_factory: pytest.TempPathFactory) -> str:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("tokenizers")
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
    from gpu_tiny_models import build_all

    return str(build_all(tmp_path_factory.mktemp("tiny"))["vlm"])


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.filterwarnings("ignore::FutureWarning")
@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_golden_vlm_prompt_through_the_gpu_stage_tokenizer_path(name: str, tiny_vlm: str) -> None:
    """The same traces through `VlmStage.build` with a real Qwen3-VL tokenizer (the tiny
    checkpoint `make test-gpu-path` uses): the text is unchanged, one frame per
    placeholder, and the prompt measured by that tokenizer fits the stage budget."""
    import io

    import anyio
    from PIL import Image

    from backends.base import VlmRequest
    from backends.gpu.engine_api import Sampling
    from backends.gpu.hf_engines import HfVlmEngine
    from backends.gpu.placement import default_placement
    from backends.gpu.vlm import VlmStage

    out = io.BytesIO()
    Image.new("RGB", (64, 64), (200, 30, 30)).save(out, format="JPEG")
    jpeg = out.getvalue()
    context, text, frames = GOLDEN[name]
    swap = dict.fromkeys((F0, F1, F2, F3), jpeg)
    real = replace(
        context,
        frames=tuple(swap[f] for f in context.frames),
        history_frames=tuple(tuple(swap[f] for f in fs) for fs in context.history_frames),
    )
    placement = replace(
        default_placement(1).vlm, model=tiny_vlm, max_model_len=8192, dtype="float32"
    )
    stage = VlmStage(HfVlmEngine(tiny_vlm), placement, sampling=Sampling(max_tokens=4))

    async def build() -> None:
        async with stage:
            built = stage.build(VlmRequest("golden", real, max_tokens=4))
            assert built.text == text
            assert len(built.images) == len(frames) == built.text.count(IMG)
            assert built.prompt_tokens <= stage.budget_tokens

    anyio.run(build)
