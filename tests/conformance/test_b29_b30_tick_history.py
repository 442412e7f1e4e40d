"""History in observation-tick form (B29, D30): what the VLM request of a later turn
carries about earlier ones: each user turn (camera-only ones too) with its time on the
session clock and its kept frames, each reply as heard, each silence as an empty
assistant turn; the frames of history bounded like the model context."""

from __future__ import annotations

from spec import events as ev
from spec.effects import SubmitVlm
from spec.limits import Limits
from tests.conformance.harness import Driver, item_create, jpeg


def _tick(d: Driver, frame: bytes, *, at_ms: int) -> None:
    """A camera-only tick committed at `at_ms` on the session clock."""
    d.send(ev.InputAudioBufferAppend(video_frames=[frame]), advance=at_ms - d.now - 10)
    d.commit(create_response=True)


def test_b29_a_camera_only_tick_answered_with_silence_is_history_with_time_and_frame() -> None:
    d = Driver()
    _tick(d, jpeg("a"), at_ms=2_000)
    first = d.last(SubmitVlm).prompt
    assert first.time_s == 2.0 and first.history == () and first.frames == (jpeg("a"),)
    d.reply("", action="listen")
    _tick(d, jpeg("b"), at_ms=3_500)
    prompt = d.last(SubmitVlm).prompt
    assert prompt.history == (("user", ""), ("assistant", ""))
    assert prompt.history_times_s == (2.0, None)
    assert prompt.history_frames == ((jpeg("a"),), ())
    assert prompt.time_s == 3.5 and prompt.frames == (jpeg("b"),)


def test_b29_a_spoken_question_and_its_reply_are_history_then_camera_ticks_follow() -> None:
    d = Driver()
    d.send(ev.InputAudioBufferAppend(video_frames=[jpeg("q")]), advance=990)
    d.speech_turn()
    d.transcribe("what is on the table")
    d.reply("A red cup.")
    d.speak()
    _tick(d, jpeg("c"), at_ms=5_000)
    prompt = d.last(SubmitVlm).prompt
    assert prompt.history == (("user", "what is on the table"), ("assistant", "A red cup."))
    assert prompt.history_frames == ((jpeg("q"),), ())
    assert prompt.history_times_s[1] is None and prompt.history_times_s[0] == 1.01
    assert prompt.asked_before


def test_b29_a_barge_in_keeps_the_heard_prefix_as_the_reply() -> None:
    d = Driver()
    d.speech_turn()
    d.transcribe("describe the room")
    d.reply("It is a large room. ")
    d.speak(ms=1_000, done=False)
    vlm_before = len(d.effects(SubmitVlm))
    d.send(ev.PlaybackAck(response_id="resp_1", played_ms=500))
    d.send(ev.ResponseCancel())
    d.speech_turn()
    d.transcribe("what colour is it")
    assert len(d.effects(SubmitVlm)) == vlm_before + 1
    prompt = d.last(SubmitVlm).prompt
    assert [t.role for t in prompt.history] == ["user", "assistant"]
    assert prompt.history[1].text == "It is a l"


def test_b29_history_frames_are_bounded_by_the_context_image_limits() -> None:
    d = Driver(limits=Limits(max_context_images=2))
    for i in range(4):
        _tick(d, jpeg(f"f{i}"), at_ms=1_000 * (i + 1))
        d.reply("", action="listen")
    _tick(d, jpeg("now"), at_ms=9_000)
    prompt = d.last(SubmitVlm).prompt
    # every tick stays in history; only the newest two frames do
    assert prompt.history_times_s == (1.0, None, 2.0, None, 3.0, None, 4.0, None)
    assert prompt.history_frames == ((), (), (), (), (jpeg("f2"),), (), (jpeg("f3"),), ())
    small = Driver(limits=Limits(max_context_image_bytes=len(jpeg("f0")) + 1))
    for i in range(3):
        _tick(small, jpeg(f"f{i}"), at_ms=1_000 * (i + 1))
        small.reply("", action="listen")
    _tick(small, jpeg("now"), at_ms=9_000)
    assert small.last(SubmitVlm).prompt.history_frames == ((), (), (), (), (jpeg("f2"),), ())


def test_b29_a_deleted_turn_takes_its_time_frames_and_silence_out_of_history() -> None:
    d = Driver()
    d.send(ev.InputAudioBufferAppend(video_frames=[jpeg("a")]), advance=1_000)
    d.commit(event_id="c1", create_response=True)
    d.reply("", action="listen")
    [added] = [e for e in d.events("conversation.item.added") if e.item.role == "user"]
    d.send(ev.ConversationItemDelete(item_id=added.item.id))
    _tick(d, jpeg("b"), at_ms=3_000)
    prompt = d.last(SubmitVlm).prompt
    assert prompt.history == () and prompt.history_frames == ()


def test_b29_a_quiet_commit_is_no_turn_and_a_typed_item_is_one() -> None:
    d = Driver()
    d.append(b"\x00\x00" * 320)
    d.commit(create_response=True)  # quiet: nothing to answer, no turn
    d.send(item_create(ev.ContentPart(type="input_text", text="hello")), advance=990)
    d.send(ev.ResponseCreate())
    d.reply("Hi.")
    d.speak()
    _tick(d, jpeg("b"), at_ms=4_000)
    prompt = d.last(SubmitVlm).prompt
    assert prompt.history == (("user", "hello"), ("assistant", "Hi."))
    assert prompt.history_times_s == (1.01, None)


def test_b30_the_session_remembers_that_it_was_asked_before() -> None:
    """`asked_before` feeds JoyAI's silence before the first question: false until a
    turn with words reached the model, true after, even once that turn left history."""
    d = Driver()
    _tick(d, jpeg("a"), at_ms=1_000)
    assert not d.last(SubmitVlm).prompt.asked_before
    d.reply("", action="listen")
    d.send(item_create(ev.ContentPart(type="input_text", text="watch the door"), item_id="q"))
    d.send(ev.ResponseCreate())
    assert not d.last(SubmitVlm).prompt.asked_before  # this turn is the first question
    d.reply("", action="listen")
    d.send(ev.ConversationItemDelete(item_id="q"))
    _tick(d, jpeg("b"), at_ms=5_000)
    prompt = d.last(SubmitVlm).prompt
    assert prompt.asked_before and all(not t.text for t in prompt.history)
