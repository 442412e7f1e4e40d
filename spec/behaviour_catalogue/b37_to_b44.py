"""The behaviour catalogue, B37-B44: each entry as data (see `spec.behaviours`)."""

from __future__ import annotations

from spec.behaviour_catalogue.entry import Behaviour, RowRef
from spec.behaviour_catalogue.sections import (
    _CALL_RESUME,
    _CANCEL,
    _CLIENT_RESUME,
    _D44,
    _DELEGATION,
    _FADE,
    _FENCING,
    _FUNCTIONS,
    _ITEMS,
    _LIMITS,
    _LIVE,
    _MANUAL_LIVE,
    _QUESTION,
    _RESUME,
    _SEMANTIC_VAD,
    _VAD,
)

__all__ = ["BEHAVIOURS"]

BEHAVIOURS: tuple[Behaviour, ...] = (
    Behaviour(
        id="B37",
        title="A session declares function tools, validated with their paths",
        summary=(
            "`session.tools` (function tools: name, description, JSON-Schema parameters) "
            "and `tool_choice` (auto, none, required, a named function) are validated and "
            "echoed by `session.updated`; a malformed or oversized declaration is "
            "`bad_event` naming the first bad field and changes nothing. "
            "`session.created`'s capabilities say whether the model calls tools at all."
        ),
        sections=(_FUNCTIONS, _LIMITS),
        rows=(),
        invariants=("I12",),
        tests=(
            "tests/conformance/test_b37_tools_declared.py::test_b37_session_update_with_a_function_tool_is_echoed_not_dropped",
            "tests/conformance/test_b37_tools_declared.py::test_b37_a_named_tool_choice_must_name_a_declared_function",
            "tests/conformance/test_b37_tools_declared.py::test_b37_malformed_or_oversized_tools_are_refused_with_their_path",
            "tests/conformance/test_b37_tools_declared.py::test_b37_an_unknown_tool_choice_is_refused",
            "tests/conformance/test_b37_tools_declared.py::test_b37_null_tools_clear_them_and_tool_choice_defaults_to_auto",
            "tests/conformance/test_b37_tools_declared.py::test_b37_an_unknown_key_of_a_tool_is_ignored",
            "tests/core/test_session_capabilities.py::test_b37_session_created_says_whether_the_model_calls_functions",
            "tests/backends/test_cpu_describer.py::test_b37_it_accepts_tools_and_never_calls_one",
        ),
    ),
    Behaviour(
        id="B38",
        title="A function call streams its arguments and ends done or incomplete",
        summary=(
            "The model's call of an offered function opens a `function_call` item with its "
            "own `output_index`; its arguments stream as "
            "`response.function_call_arguments.delta`, and the decision ends it "
            "(arguments done, item done); a response that only calls completes with the "
            "call in `response.done`. A cancel, barge-in or failure during the arguments, "
            "or arguments past their bound, end it `incomplete`; calls of functions the "
            "session does not offer are dropped. Under `tool_choice` `required` or a named "
            "function the reply is held until the decision, and a response without a call "
            "of an offered function fails unspoken with `tool_choice_unmet`."
        ),
        sections=(_FUNCTIONS, _CANCEL, _FENCING),
        rows=(
            RowRef("function_call", "stream"),
            RowRef("function_call", "finish"),
            RowRef("function_call", "cut"),
        ),
        invariants=("CALL-2", "I2", "I4"),
        tests=(
            "tests/conformance/test_b38_b39_function_calls.py::test_b38_the_model_gets_the_offered_tools_and_tool_choice",
            "tests/conformance/test_b38_b39_function_calls.py::test_b38_a_call_streams_its_arguments_and_the_response_completes_with_it",
            "tests/conformance/test_b38_b39_function_calls.py::test_b38_a_spoken_note_and_a_call_have_their_own_output_indices",
            "tests/conformance/test_b38_b39_function_calls.py::test_b38_a_call_of_a_function_the_session_does_not_offer_is_dropped",
            "tests/conformance/test_b38_b39_function_calls.py::test_b38_a_named_tool_choice_offers_that_function_only",
            "tests/conformance/test_b38_b39_function_calls.py::test_b38_cancel_during_the_arguments_ends_the_call_incomplete_and_keeps_the_history",
            "tests/conformance/test_b38_b39_function_calls.py::test_b38_a_barge_in_during_the_arguments_cuts_the_call_and_starts_the_next_turn",
            "tests/conformance/test_b38_b39_function_calls.py::test_b38_arguments_past_their_bound_cut_the_call",
            "tests/conformance/test_b38_b39_function_calls.py::test_b38_a_call_item_cannot_be_truncated_even_when_its_response_spoke",
            "tests/conformance/test_b38_b39_function_calls.py::test_b38_a_connection_dropped_during_the_arguments_replays_the_whole_call",
            "tests/conformance/test_b38_b39_function_calls.py::test_b38_under_required_a_turn_without_a_call_fails_unspoken_with_a_typed_error",
            "tests/conformance/test_b38_b39_function_calls.py::test_b38_under_required_a_listen_decision_fails_too",
            "tests/conformance/test_b38_b39_function_calls.py::test_b38_under_required_the_reply_waits_for_the_decision_then_speaks_with_the_call",
            "tests/conformance/test_b38_b39_function_calls.py::test_b38_a_named_tool_choice_fails_a_turn_that_calls_only_another_function",
            "tests/conformance/test_b38_b39_function_calls.py::test_b38_required_without_a_declared_tool_asks_for_no_call",
            "tests/transport/test_function_calls_sdk.py::test_b38_the_openai_sdk_declares_a_tool_gets_the_call_and_hears_the_follow_up",
            "tests/transport/test_resume.py::test_b38_a_connection_dropped_during_a_calls_arguments_resumes_with_the_whole_call",
        ),
    ),
    Behaviour(
        id="B39",
        title="The client answers a call once; the follow-up speaks from its output",
        summary=(
            "A `function_call_output` item answers the call its `call_id` names: an unknown "
            "(or deleted) call, one already answered, or one cut or still streaming is a "
            "typed error that changes nothing. Accepted, it waits like a user item for the "
            "client's `response.create`, whose model reads the output as its turn and the "
            "call in history. A client may bring a `function_call` item of its own."
        ),
        sections=(_FUNCTIONS, _ITEMS),
        rows=(RowRef("function_call", "answer"), RowRef("function_call", "import_call")),
        invariants=("CALL-1",),
        tests=(
            "tests/conformance/test_b38_b39_function_calls.py::test_b39_the_output_is_added_and_the_follow_up_speaks_from_it",
            "tests/conformance/test_b38_b39_function_calls.py::test_b39_an_output_for_an_unknown_call_id_is_a_typed_error_that_changes_nothing",
            "tests/conformance/test_b38_b39_function_calls.py::test_b39_a_second_output_for_one_call_is_a_typed_error",
            "tests/conformance/test_b38_b39_function_calls.py::test_b39_an_output_for_a_call_cut_or_still_streaming_is_a_typed_error",
            "tests/conformance/test_b38_b39_function_calls.py::test_b39_a_deleted_call_answers_nothing",
            "tests/conformance/test_b38_b39_function_calls.py::test_b39_a_call_the_client_brings_as_history_can_be_answered_once",
            "tests/conformance/test_b38_b39_function_calls.py::test_b39_malformed_function_items_are_refused_with_their_path",
            "tests/transport/test_client_functions.py::test_b39_the_python_client_runs_an_async_function_and_hears_the_follow_up",
            "tests/transport/test_client_functions.py::test_b39_a_function_that_raises_is_answered_with_its_error",
            "tests/transport/test_client_functions.py::test_b39_an_answer_before_the_calls_response_is_done_still_gets_the_follow_up",
            "tests/web/test_browser_function_calls.py::test_b39_the_page_shows_a_call_then_its_output_and_plays_the_follow_up",
        ),
    ),
    Behaviour(
        id="B40",
        title="JoyAI's delegation becomes a function call when the session offers one",
        summary=(
            "When the session offers the delegation's function (a tool named `delegate`, or "
            "the one `extra_body.delegation_tool` names), a delegated question becomes a "
            "call of it, the question as its one string parameter, made at once after the "
            "spoken note; the client answers it like any call. Without that function "
            "offered, the background model answers as in B31. JoyAI's prompt is unchanged."
        ),
        sections=(_FUNCTIONS, _DELEGATION),
        rows=(RowRef("function_call", "stream"), RowRef("function_call", "finish")),
        invariants=("CALL-1",),
        tests=(
            "tests/conformance/test_b40_delegation_as_a_call.py::test_b40_a_declared_delegate_tool_turns_the_question_into_a_call",
            "tests/conformance/test_b40_delegation_as_a_call.py::test_b40_the_session_may_name_another_function_with_its_own_parameter",
            "tests/conformance/test_b40_delegation_as_a_call.py::test_b40_without_the_function_offered_the_background_model_answers_as_before",
            "tests/conformance/test_b40_delegation_as_a_call.py::test_b40_a_delegation_tool_that_is_no_function_name_is_refused",
            "tests/backends/test_remote_turns.py::test_b40_joyai_delegation_over_the_remote_backend_becomes_the_sessions_function_call",
            "tests/backends/test_remote_turns.py::test_b40_the_openai_sdk_gets_joyai_delegation_as_a_call_over_serve_backend_remote",
        ),
    ),
    Behaviour(
        id="B41",
        title="Live transcripts while a push-to-talk hold is held",
        summary=(
            "Under manual turns, with an ASR that offers it, the hold is transcribed while "
            "it is held: each append's speech verdict plays the VAD's part (the first "
            "speech names the item, the first quiet append after speech asks the pause's "
            "partial of all the audio, a cadence asks while speech goes on, one at a "
            "time) and new words become `delta` events. A release whose audio is the "
            "latest pause partial's and quiet appends after it takes that partial's words "
            "as its transcript, without a second ASR; speech the partial did not hear "
            "gives the commit its own."
        ),
        sections=(_MANUAL_LIVE, _D44, _LIVE),
        rows=(),
        invariants=("I11",),
        tests=(
            "tests/conformance/test_b41_ptt_live_text.py::test_b41_a_hold_is_transcribed_at_its_pause_and_the_release_takes_those_words",
            "tests/conformance/test_b41_ptt_live_text.py::test_b41_a_pause_partial_answering_after_the_release_is_the_commits_transcript",
            "tests/conformance/test_b41_ptt_live_text.py::test_b41_speech_after_the_pause_partial_gives_the_release_its_own_asr",
            "tests/conformance/test_b41_ptt_live_text.py::test_b41_a_failed_pause_partial_leaves_the_release_its_own_asr",
            "tests/conformance/test_b41_ptt_live_text.py::test_b41_on_a_cadence_while_speech_is_held_with_at_most_one_in_flight",
            "tests/conformance/test_b41_ptt_live_text.py::test_b41_a_pause_supersedes_a_cadence_partial_still_out",
            "tests/conformance/test_b41_ptt_live_text.py::test_b41_no_partial_when_the_asr_offers_none",
            "tests/conformance/test_b41_ptt_live_text.py::test_b41_a_cleared_hold_drops_its_partial_and_the_next_hold_starts_afresh",
            "tests/stateful/test_session_vs_reference.py::test_b41_a_push_to_talk_hold_with_live_text_agrees_step_by_step",
        ),
    ),
    Behaviour(
        id="B42",
        title="The client resumes its session through a network drop",
        summary=(
            "A resumable session's call whose socket fails once ready drops its link "
            "instead of ending: nothing but `session.resume` goes out while it is down "
            "(a live push-to-talk hold is cut, the camera and the button pause, other "
            "sends wait), attempts follow a doubling backoff scaled by the host's jitter, "
            "bounded in number and time, and the resume carries the last "
            "`server_event_seq`; a replayed event already applied is skipped, the reply "
            "continues from the replay or is cut by `session.resync_required`; a refusal "
            "or the end of the attempts loses the call with a notice."
        ),
        sections=(_CLIENT_RESUME, _RESUME, _CALL_RESUME),
        rows=(
            RowRef("client_resume", "drop"),
            RowRef("client_resume", "attempt"),
            RowRef("client_resume", "opened"),
            RowRef("client_resume", "fail"),
            RowRef("client_resume", "refused"),
            RowRef("client_resume", "resumed"),
            RowRef("client_connection", "drop"),
            RowRef("client_connection", "resumed"),
            RowRef("client_hold", "cut"),
        ),
        invariants=("L1", "L2", "L3", "L4"),
        tests=(
            "tests/conformance/test_b42_client_resume.py::test_b42_a_drop_mid_reply_resumes_with_the_cursor_and_the_replay_applies_once",
            "tests/conformance/test_b42_client_resume.py::test_b42_nothing_goes_out_while_the_link_is_down_and_held_sends_follow_the_resume",
            "tests/conformance/test_b42_client_resume.py::test_b42_a_hold_cut_by_the_drop_sends_no_commit_and_the_resume_clears_its_audio",
            "tests/conformance/test_b42_client_resume.py::test_b42_the_backoff_doubles_up_to_the_cap_scaled_by_the_hosts_jitter",
            "tests/conformance/test_b42_client_resume.py::test_b42_attempts_are_bounded_in_time_then_the_call_is_lost",
            "tests/conformance/test_b42_client_resume.py::test_b42_an_attempt_that_never_answers_is_abandoned_and_retried",
            "tests/conformance/test_b42_client_resume.py::test_b42_a_refused_resume_loses_the_call_at_once",
            "tests/conformance/test_b42_client_resume.py::test_b42_resync_required_marks_the_reply_in_flight_as_cut",
            "tests/conformance/test_b42_client_resume.py::test_b42_a_session_without_a_token_ends_on_a_drop_as_before",
            "tests/conformance/test_b42_client_resume.py::test_b42_the_resume_token_stays_inside_the_protocol",
            "tests/conformance/test_b42_client_resume.py::test_b42_a_silent_link_is_probed_while_sending_then_dropped",
            "tests/conformance/test_b42_client_resume.py::test_b42_an_idle_client_sends_no_probe",
            "tests/transport/test_client_reconnect.py::test_b42_python_client_resumes_a_drop_mid_reply_and_gets_every_event_once",
            "tests/transport/test_client_reconnect.py::test_b42_python_client_loses_a_session_the_server_no_longer_holds",
            "tests/transport/test_client_reconnect.py::test_b42_python_client_gives_up_when_the_network_never_returns",
            "tests/transport/test_call_resume.py::test_b42_a_resumable_call_resumes_its_session_through_a_new_call",
            "tests/transport/test_call_resume.py::test_b42_a_resume_call_that_does_not_begin_with_session_resume_is_refused",
            "tests/transport/test_call_resume.py::test_b42_a_sideband_follows_its_session_to_the_call_that_resumes_it",
            "tests/transport/test_call_resume.py::test_b42_a_resume_call_that_reaches_another_worker_is_relayed_to_its_session",
            "tests/web/test_browser_resume.py::test_b42_websocket_drop_mid_reply_resumes_the_same_session_and_the_next_turn_works",
            "tests/web/test_browser_resume.py::test_b42_a_drop_longer_than_the_resume_grace_is_lost_and_connect_starts_a_new_session",
            "tests/web/test_browser_resume.py::test_b42_webrtc_call_killed_mid_reply_resumes_through_a_new_call",
            "tests/web/test_browser_resume.py::test_b42_a_silent_drop_is_found_by_the_probe_and_resumed",
        ),
    ),
    Behaviour(
        id="B43",
        title="The pause's work starts when the speech's energy falls",
        summary=(
            "Each VAD frame comes with its level (dBFS). The first frame of speech whose "
            "level falls `FADE_DB` (30 dB) below the utterance's loudest speech frame fades "
            "it: the pause's live partial is asked there, and its words may start the "
            "preemptive reply (B35), before Silero's lag lets the pause begin. Only a frame "
            "that is speech by both measures (probability at or above the threshold, level "
            "at or above the floor) resumes the speech, and discards that work as speech "
            "after a pause does. A fade never ends a turn or asks a review: those still "
            "follow the probabilities alone. Without levels nothing fades."
        ),
        sections=(_FADE, _VAD, _SEMANTIC_VAD, _LIVE),
        rows=(
            RowRef("turn_detector", "fade"),
            RowRef("turn_detector", "resume"),
        ),
        invariants=("VAD-3",),
        tests=(
            "tests/conformance/test_b43_fade_onset.py::test_b43_the_first_faded_frame_asks_the_pause_words_before_silero_scores_a_pause",
            "tests/conformance/test_b43_fade_onset.py::test_b43_the_fades_words_start_the_reply_and_the_turn_end_adopts_it_and_them",
            "tests/conformance/test_b43_fade_onset.py::test_b43_speech_after_a_dip_discards_the_prepared_reply_and_the_turn_goes_on",
            "tests/conformance/test_b43_fade_onset.py::test_b43_a_fade_never_ends_a_turn_while_silero_scores_speech",
            "tests/conformance/test_b43_fade_onset.py::test_b43_the_floor_follows_the_utterance_not_a_fixed_level",
            "tests/conformance/test_b43_fade_onset.py::test_b43_without_levels_the_pause_begins_with_silero_as_before",
            "tests/conformance/test_b43_fade_onset.py::test_b43_under_semantic_vad_the_review_reads_the_words_asked_at_the_fade",
            "tests/stateful/test_session_vs_reference.py::test_b43_a_fade_a_dip_and_the_pause_after_agree_step_by_step",
            "tests/runtime/test_vad_feed_levels.py::test_b43_each_frames_level_comes_with_its_probability_in_order",
        ),
    ),
    Behaviour(
        id="B44",
        title="A question the words close ends an eager pause",
        summary=(
            "Under `semantic_vad` eagerness high, a pause whose words (the pause's partial, "
            "or the verdict's own) come from an ASR that punctuates and end with a question "
            "mark, after any closing quotes or brackets and not after a word that cannot "
            "close a sentence, counts as finished though the end-of-turn model's probability "
            "is below the threshold. As the model's own finish, it ends the turn at once "
            "when the pause is 200 ms long, else once it is (speech before then was a "
            "comma). A period or an exclamation mark finishes nothing (Whisper closes "
            "fragments with one), nor do the words of an ASR that never punctuates, nor "
            "words without a verdict; low, medium and auto leave the verdict to the model."
        ),
        sections=(_QUESTION, _SEMANTIC_VAD, _LIVE),
        rows=(
            RowRef("turn_detector", "finish"),
            RowRef("turn_detector", "hold"),
            RowRef("turn_detector", "time_out"),
        ),
        invariants=("VAD-2",),
        tests=(
            "tests/conformance/test_b44_question_words_finish.py::test_b44_a_question_the_model_holds_ends_the_turn_at_the_200_ms_pause_under_high",
            "tests/conformance/test_b44_question_words_finish.py::test_b44_a_question_at_the_second_review_ends_the_turn_at_once",
            "tests/conformance/test_b44_question_words_finish.py::test_b44_under_a_patient_eagerness_a_question_the_model_holds_waits_its_max_wait",
            "tests/conformance/test_b44_question_words_finish.py::test_b44_words_without_a_closing_question_mark_do_not_finish",
            "tests/conformance/test_b44_question_words_finish.py::test_b44_the_question_of_an_asr_that_never_punctuates_does_not_finish",
            "tests/conformance/test_b44_question_words_finish.py::test_b44_speech_before_200_ms_after_a_question_was_a_comma_and_the_turn_goes_on",
            "tests/conformance/test_b44_question_words_finish.py::test_b44_the_verdict_that_came_before_its_question_words_waits_for_them_then_finishes",
            "tests/conformance/test_b44_question_words_finish.py::test_b44_without_a_verdict_question_words_wait_the_silence_duration",
            "tests/spec/test_trailing_transcript.py::test_b44_words_that_end_with_a_question_mark_close_a_question",
            "tests/spec/test_trailing_transcript.py::test_b44_a_period_an_open_word_or_no_mark_closes_no_question",
            "tests/spec/test_trailing_transcript.py::test_b44_an_asr_that_never_punctuates_closes_no_question",
            "tests/spec/test_trailing_transcript.py::test_b44_nothing_heard_closes_no_question",
            "tests/spec/test_trailing_transcript.py::test_b44_a_closed_question_never_trails_off",
            "tests/stateful/test_session_vs_reference.py::test_b44_a_question_the_words_close_agrees_step_by_step",
        ),
    ),
)
