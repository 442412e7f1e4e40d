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

Two kinds of trace: hand-built prompt contexts (one per moment), and one whole session
driven through the core (`SessionProtocol`, B29), whose VLM requests are rendered as the
stage renders them; that session also shows JoyAI's silence before the first question
(B30). They run in the default suite through the pure-Python renderer (`render_chatml`);
the slow tests send both through the VLM stage's real tokenizer path (tiny Qwen3-VL
checkpoint, as `make test-gpu-path` does) and skip cleanly without torch.
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


def _through_the_stage(
    context: PromptContext, text: str, frames: tuple[bytes, ...], tiny_vlm: str
) -> None:
    """`VlmStage.build` with a real Qwen3-VL tokenizer (the tiny checkpoint `make
    test-gpu-path` uses): the text is unchanged, one frame per placeholder, and the
    prompt measured by that tokenizer fits the stage budget."""
    import anyio

    from backends.base import VlmRequest
    from backends.gpu.engine_api import Sampling
    from backends.gpu.hf_engines import HfVlmEngine
    from backends.gpu.placement import default_placement
    from backends.gpu.vlm import VlmStage

    placement = replace(
        default_placement(1).vlm, model=tiny_vlm, max_model_len=8192, dtype="float32"
    )
    stage = VlmStage(HfVlmEngine(tiny_vlm), placement, sampling=Sampling(max_tokens=4))

    async def build() -> None:
        async with stage:
            built = stage.build(VlmRequest("golden", context, max_tokens=4))
            assert built.text == text
            assert len(built.images) == len(frames) == built.text.count(IMG)
            assert built.prompt_tokens <= stage.budget_tokens

    anyio.run(build)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.filterwarnings("ignore::FutureWarning")
@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_golden_vlm_prompt_through_the_gpu_stage_tokenizer_path(name: str, tiny_vlm: str) -> None:
    """The hand-built traces through the stage's real tokenizer path (frames swapped
    for a real JPEG)."""
    context, text, frames = GOLDEN[name]
    jpeg = _jpeg_of((200, 30, 30))
    swap = dict.fromkeys((F0, F1, F2, F3), jpeg)
    real = replace(
        context,
        frames=tuple(swap[f] for f in context.frames),
        history_frames=tuple(tuple(swap[f] for f in fs) for fs in context.history_frames),
    )
    _through_the_stage(real, text, frames, tiny_vlm)


# --- full session traces, driven through the core -------------------------------------
#
# One session, as a client drives it, through `core.session.SessionProtocol` (the
# conformance `Driver`); each VLM request the core submits is rendered by the JoyAI stage.
# The model's answers are scripted, except where JoyAI's serving rules decide (B30).
# Times are on the session clock (the commit's event time), frames are real JPEGs so the
# slow variant below can send them through the real processor.


def _jpeg_of(rgb: tuple[int, int, int]) -> bytes:
    import io

    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (32, 32), rgb).save(out, format="JPEG")
    return out.getvalue()


T0, T1, T2, T3, T4, T5, T6 = (_jpeg_of((30 * i, 200 - 20 * i, 90)) for i in range(7))


def _session_trace() -> dict[str, PromptContext]:
    """The prompt contexts of one session's VLM requests, by moment."""
    from backends.joyai.policy import silent_before_first_question
    from spec import events as ev
    from spec.effects import SubmitVlm
    from tests.conformance.harness import Driver, speech_pcm

    d = Driver()
    contexts: dict[str, PromptContext] = {}

    def commit_at(ms: int, *, audio: bytes = b"", frame: bytes) -> None:
        d.send(ev.InputAudioBufferAppend(audio=audio, video_frames=[frame]), advance=ms - d.now)
        d.send(ev.InputAudioBufferCommit(create_response=True), advance=0)

    def played(ms: int) -> None:
        """The client played the whole reply and says so (else a later barge-in would
        clear it too, B19)."""
        d.speak(ms=ms)
        d.send(ev.PlaybackAck(response_id=d.last(SubmitVlm).response_id, played_ms=ms))

    def model(name: str, text: str = "", action: str = "speak") -> PromptContext:
        context = d.last(SubmitVlm).prompt
        contexts[name] = context
        if silent_before_first_question(context) or action == "listen":
            d.reply("", action="listen")
        else:
            d.reply(text, action=action)
        return context

    commit_at(1_000, frame=T0)  # the camera is on; nobody asked anything yet
    model("before_question", "I see a table.")  # never asked: silence
    commit_at(3_000, audio=speech_pcm(300), frame=T1)
    d.transcribe("What is on the table?")
    model("trace_question", "A red cup.")
    played(1_000)
    commit_at(4_000, frame=T2)
    model("trace_camera", action="listen")
    commit_at(5_000, frame=T3)
    model("trace_silence", "The cup is next to a plate. ")
    d.speak(ms=1_000, done=False)
    d.send(ev.PlaybackAck(response_id=d.last(SubmitVlm).response_id, played_ms=400))
    d.send(ev.ResponseCancel())  # the user talks over the reply
    commit_at(6_500, audio=speech_pcm(300), frame=T4)
    d.transcribe("Wait, what colour is the plate?")
    model("trace_barge_in", "White.")
    played(500)
    commit_at(8_000, audio=speech_pcm(300), frame=T5)
    d.transcribe("What year was this book printed?")
    model("trace_delegate", "Let me look that up.", action="delegate")
    played(1_000)
    commit_at(9_000, frame=T6)
    model("trace_delegated", action="listen")
    return contexts


_SESSION_START = f"<|im_start|>system\n{SYSTEM}<|im_end|>\n"
# the camera tick before any question: answered `</silence>` without the model, and kept
# in history like every tick (the reference server's forced silence before the first
# query appends the same `</silence>` answer)
_TICK_0 = (
    f"<|im_start|>user\n<1.0 seconds>{IMG}<|im_end|>\n<|im_start|>assistant\n</silence><|im_end|>\n"
)
_ASKED = (
    f"<|im_start|>user\n{HEADER}\nWhat is on the table?<3.0 seconds>{IMG}<|im_end|>\n"
    "<|im_start|>assistant\n</response> A red cup.<|im_end|>\n"
)
_TICK_4 = (
    f"<|im_start|>user\n<4.0 seconds>{IMG}<|im_end|>\n<|im_start|>assistant\n</silence><|im_end|>\n"
)
_CUT = (
    f"<|im_start|>user\n<5.0 seconds>{IMG}<|im_end|>\n"
    "<|im_start|>assistant\n</response> The cup is<|im_end|>\n"
)
_PLATE = (
    f"<|im_start|>user\n{HEADER}\nWait, what colour is the plate?<6.5 seconds>{IMG}<|im_end|>\n"
    "<|im_start|>assistant\n</response> White.<|im_end|>\n"
)
_BOOK = (
    f"<|im_start|>user\n{HEADER}\nWhat year was this book printed?<8.0 seconds>{IMG}<|im_end|>\n"
    "<|im_start|>assistant\n</response> Let me look that up.<|im_end|>\n"
)
_GENERATE = "<|im_start|>assistant\n"

TRACE_GOLDEN: dict[str, tuple[str, tuple[bytes, ...]]] = {
    # a spoken question with a frame: the earlier silent tick, then the header, the
    # question, the tick's time marker and its frame in one user message (the reference
    # server's user message of the tick the query arrives on)
    "trace_question": (
        _SESSION_START
        + _TICK_0
        + f"<|im_start|>user\n{HEADER}\nWhat is on the table?<3.0 seconds>{IMG}<|im_end|>\n"
        + _GENERATE,
        (T0, T1),
    ),
    # a camera-only tick after it: the question stays on its own tick and its answer
    # follows it as `</response> ...`; the new tick is a time marker and a frame only
    # (the reference keeps every tick of the chunk, the header only where the query came)
    "trace_camera": (
        _SESSION_START
        + _TICK_0
        + _ASKED
        + f"<|im_start|>user\n<4.0 seconds>{IMG}<|im_end|>\n"
        + _GENERATE,
        (T0, T1, T2),
    ),
    # a silence: the tick the model stayed silent on stays in history as `</silence>` (the
    # reference appends the normalized answer of every tick, silent ones included)
    "trace_silence": (
        _SESSION_START
        + _TICK_0
        + _ASKED
        + _TICK_4
        + f"<|im_start|>user\n<5.0 seconds>{IMG}<|im_end|>\n"
        + _GENERATE,
        (T0, T1, T2, T3),
    ),
    # a barge-in: the reply that was cut stays as the prefix the user heard (400 of 1000
    # ms: "The cup is"), still in the model's `</response>` form; the interrupting
    # question opens its own tick with the header (the reference records what was
    # actually output on each tick)
    "trace_barge_in": (
        _SESSION_START
        + _TICK_0
        + _ASKED
        + _TICK_4
        + _CUT
        + f"<|im_start|>user\n{HEADER}\nWait, what colour is the plate?"
        + f"<6.5 seconds>{IMG}<|im_end|>\n"
        + _GENERATE,
        (T0, T1, T2, T3, T4),
    ),
    # a delegated question: its tick carries the header; the model's answer in history is
    # the spoken note only, as `</response> note` (the delegated question went to the
    # background solver, never to speech, so the reference's normalized answer keeps the
    # first line's note)
    "trace_delegate": (
        _SESSION_START
        + _TICK_0
        + _ASKED
        + _TICK_4
        + _CUT
        + _PLATE
        + f"<|im_start|>user\n{HEADER}\nWhat year was this book printed?"
        + f"<8.0 seconds>{IMG}<|im_end|>\n"
        + _GENERATE,
        (T0, T1, T2, T3, T4, T5),
    ),
    "trace_delegated": (
        _SESSION_START
        + _TICK_0
        + _ASKED
        + _TICK_4
        + _CUT
        + _PLATE
        + _BOOK
        + f"<|im_start|>user\n<9.0 seconds>{IMG}<|im_end|>\n"
        + _GENERATE,
        (T0, T1, T2, T3, T4, T5, T6),
    ),
}


def test_b30_the_first_camera_tick_of_a_session_is_never_sent_to_the_model() -> None:
    """Mirrors the reference server's forced silence before the first query: the tick
    is answered `</silence>` by the serving code, and the session records that silence."""
    from backends.joyai.policy import silent_before_first_question

    context = _session_trace()["before_question"]
    assert context.history == () and context.transcript is None and context.time_s == 1.0
    assert silent_before_first_question(context)


@pytest.mark.parametrize("name", sorted(TRACE_GOLDEN))
def test_b29_golden_session_trace_prompt(name: str) -> None:
    context = _session_trace()[name]
    text, frames = TRACE_GOLDEN[name]
    rendered, images = _render(context)
    assert rendered == text
    assert images == frames and rendered.count(IMG) == len(frames)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.filterwarnings("ignore::FutureWarning")
@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("name", sorted(TRACE_GOLDEN))
def test_b29_golden_session_trace_through_the_gpu_stage_tokenizer_path(
    name: str, tiny_vlm: str
) -> None:
    """The session traces, as the core built them, through the stage's real tokenizer."""
    text, frames = TRACE_GOLDEN[name]
    _through_the_stage(_session_trace()[name], text, frames, tiny_vlm)
