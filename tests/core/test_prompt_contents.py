"""What the VLM receives for a response (docs/session-semantics.md section 3): the turn's
texts in content order, live segments only, history by item role, the default system
prompt; and the assistant item's status in the done-chain of a cancelled response."""

from __future__ import annotations

from spec import events as ev
from spec.effects import SubmitAsr, SubmitVlm
from spec.session_config import DEFAULT_INSTRUCTIONS
from tests.conformance.harness import Driver, item_create, speech_pcm


def _text(text: str) -> ev.ContentPart:
    return ev.ContentPart(type="input_text", text=text)


def _audio() -> ev.ContentPart:
    return ev.ContentPart(type="input_audio", audio=speech_pcm(200))


def test_b4_typed_text_and_spoken_audio_of_one_item_reach_the_vlm_in_content_order() -> None:
    d = Driver()
    d.send(item_create(_text("look:"), _audio(), _text("(on the table)")))
    d.send(ev.ResponseCreate())
    d.transcribe("a cup")
    assert d.last(SubmitVlm).prompt.transcript == "look: a cup (on the table)"


def test_an_empty_client_transcript_counts_as_transcribed_and_skips_asr() -> None:
    d = Driver()
    d.send(
        item_create(
            _text("hello"), ev.ContentPart(type="input_audio", audio=speech_pcm(100), transcript="")
        )
    )
    d.send(ev.ResponseCreate())
    assert d.effects(SubmitAsr) == []
    assert d.last(SubmitVlm).prompt.transcript == "hello"


def test_b5_a_segment_deleted_while_asr_runs_adds_nothing_to_the_prompt() -> None:
    d = Driver()
    d.send(item_create(_text("forget this"), item_id="typed"))
    d.append(speech_pcm(300))
    d.commit(create_response=True)
    d.send(ev.ConversationItemDelete(item_id="typed"))
    d.transcribe("what colour is this")
    prompt = d.last(SubmitVlm).prompt
    assert prompt.transcript == "what colour is this"
    assert prompt.history == ()


def test_b3_system_items_enter_history_as_system_turns() -> None:
    d = Driver()
    d.send(item_create(_text("answer in French"), role="system"))
    d.send(item_create(_text("hello")))
    d.send(ev.ResponseCreate())
    prompt = d.last(SubmitVlm).prompt
    assert prompt.history == (("system", "answer in French"),)
    assert prompt.system == DEFAULT_INSTRUCTIONS


def test_b11_cancelled_response_closes_its_assistant_item_as_completed() -> None:
    d = Driver()
    d.speech_turn()
    d.transcribe("tell me a story")
    d.reply("Once upon a time. ")
    d.speak(done=False)
    out = d.send(ev.ResponseCancel())
    [item_done] = d.events("response.output_item.done", out)
    [conversation_done] = [
        e for e in d.events("conversation.item.done", out) if e.item.role == "assistant"
    ]
    assert item_done.item.status == conversation_done.item.status == "completed"


def test_the_session_transcription_language_reaches_the_asr_request() -> None:
    """`audio.input.transcription.language` is what the ASR is told; unset, it detects."""
    d = Driver(config={"audio": {"input": {"transcription": {"language": "fr"}}}})
    d.append(speech_pcm(300))
    d.commit(create_response=True)
    assert d.last(SubmitAsr).language == "fr"
    plain = Driver()
    plain.append(speech_pcm(300))
    plain.commit(create_response=True)
    assert plain.last(SubmitAsr).language is None


def test_session_update_refuses_a_voice_the_tts_backend_lacks() -> None:
    """The TTS backend's voices are handed to the session as data (runtime/host.py)."""
    from core.session import SessionProtocol
    from spec.errors import InvalidSessionConfig

    protocol = SessionProtocol(session_id="s", voices=frozenset({"Vivian"}))
    protocol.next_outputs()
    try:
        protocol.receive(ev.SessionUpdate(session={"voice": "alloy"}), 10)  # type: ignore[arg-type]
    except InvalidSessionConfig as exc:
        assert exc.code == "unsupported_voice"
    else:
        raise AssertionError("voice `alloy` was accepted")
    assert protocol.config.voice is None
    protocol.receive(ev.SessionUpdate(session={"voice": "Vivian"}), 20)  # type: ignore[arg-type]
    assert protocol.config.voice == "Vivian"


def test_an_id_deleted_and_created_again_is_history_not_the_responses_own_segment() -> None:
    """The prompt leaves out the response's own segments by item version (B5): an id the
    client deleted and created again meanwhile is another, completed item, so it is
    history (the oracle's reading; found by the stateful comparison)."""
    d = Driver()
    d.speech_turn()
    asr: SubmitAsr = d.last(SubmitAsr)
    d.send(ev.ConversationItemDelete(item_id=asr.item.item_id))
    d.send(item_create(_text("a new item"), item_id=asr.item.item_id))
    d.transcribe("the first words", asr)
    assert d.last(SubmitVlm).prompt.history == (("user", "a new item"),)


def test_the_session_max_output_tokens_caps_each_vlm_request_and_inf_lifts_it() -> None:
    d = Driver()
    d.send(item_create(_text("hello")))
    d.send(ev.ResponseCreate())
    assert d.last(SubmitVlm).max_tokens is None  # default "inf": the backend's own cap
    d.send(ev.SessionUpdate(session=ev.SessionPatch(max_output_tokens=32)))
    d.send(ev.ResponseCancel())
    d.send(item_create(_text("again")))
    d.send(ev.ResponseCreate())
    assert d.last(SubmitVlm).max_tokens == 32
