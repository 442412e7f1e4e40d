"""The behaviour catalogue, B28-B36: each entry as data (see `spec.behaviours`)."""

from __future__ import annotations

from spec.behaviour_catalogue.entry import Behaviour, RowRef
from spec.behaviour_catalogue.sections import (
    _CALLS,
    _CANCEL,
    _D40,
    _D42,
    _DELEGATION,
    _FAILURE,
    _FENCING,
    _HISTORY,
    _LIMITS,
    _LIVE,
    _PIPELINE,
    _PLAYBACK,
    _PREEMPTION,
    _SEMANTIC_VAD,
    _SESSION,
    _TICKS,
    _VAD,
)

__all__ = ["BEHAVIOURS"]

BEHAVIOURS: tuple[Behaviour, ...] = (
    Behaviour(
        id="B28",
        title="Hostile input and stage faults stay inside their session",
        summary=(
            "A flood of malformed, mistyped, out-of-range, oversized, deeply nested, binary "
            "or out-of-order events gets only typed `error` events and crashes nothing; a "
            "stage that raises, hangs past its timeout or reports its engine dead at any "
            "step fails only the response that owns it: a concurrent session and the next "
            "turn complete, and no task is left behind."
        ),
        sections=(_LIMITS, _FAILURE),
        rows=(RowRef("response", "fail"),),
        invariants=(),
        tests=(
            "tests/conformance/test_b28_hostile_input.py::test_b28_seeded_hostile_frames_are_applied_or_refused_and_a_refusal_changes_nothing",
            "tests/transport/test_hostile_input.py::test_b28_a_seeded_flood_of_100k_hostile_frames_gets_only_typed_errors_and_crashes_nothing",
            "tests/transport/test_hostile_input.py::test_b28_invalid_utf8_in_a_text_frame_closes_only_its_connection_with_1007",
            "tests/transport/test_hostile_input.py::test_b28_a_hostile_session_among_eight_clean_ones_leaves_them_untouched",
            "tests/runtime/test_stage_faults.py::test_b28_a_stage_fault_fails_only_its_response",
        ),
    ),
    Behaviour(
        id="B29",
        title="History is a sequence of observation ticks with times, frames and silences",
        summary=(
            "Every earlier user turn (camera-only ones too) reaches the VLM with its time on "
            "the session clock and, for the newest turns, its frames (at most "
            "max_context_images and max_context_image_bytes for the whole session); every "
            "reply as it was heard; every turn the model answered with silence as an empty "
            "assistant turn. The JoyAI stage renders them in the weights' tick format; with "
            "summary_memory on, the turns its token budget drops are summarised in the "
            "background by the same model (bounded in sessions, characters and time; a "
            "failure keeps the old summary and never touches a reply) and the summary opens "
            "later prompts."
        ),
        sections=(_TICKS, _HISTORY, _PIPELINE),
        rows=(RowRef("response", "listen"),),
        invariants=(),
        tests=(
            "tests/conformance/test_b29_b30_tick_history.py::test_b29_a_camera_only_tick_answered_with_silence_is_history_with_time_and_frame",
            "tests/conformance/test_b29_b30_tick_history.py::test_b29_a_spoken_question_and_its_reply_are_history_then_camera_ticks_follow",
            "tests/conformance/test_b29_b30_tick_history.py::test_b29_a_barge_in_keeps_the_heard_prefix_as_the_reply",
            "tests/conformance/test_b29_b30_tick_history.py::test_b29_history_frames_are_bounded_by_the_context_image_limits",
            "tests/conformance/test_b29_b30_tick_history.py::test_b29_a_deleted_turn_takes_its_time_frames_and_silence_out_of_history",
            "tests/conformance/test_b29_b30_tick_history.py::test_b29_a_quiet_commit_is_no_turn_and_a_typed_item_is_one",
            "tests/backends/test_joyai_golden_prompts.py::test_b29_golden_session_trace_prompt",
            "tests/backends/test_joyai_golden_prompts.py::test_b29_golden_session_trace_through_the_gpu_stage_tokenizer_path",
            "tests/backends/test_joyai_summary_memory.py::test_b29_an_over_budget_history_starts_one_background_summary_and_a_later_prompt_shows_it",
            "tests/backends/test_joyai_summary_memory.py::test_b29_the_summary_with_the_window_stays_within_the_budget",
            "tests/backends/test_joyai_summary_memory.py::test_b29_a_failed_or_timed_out_summary_leaves_the_reply_alone_and_keeps_the_old_summary",
            "tests/backends/test_joyai_summary_memory.py::test_b29_with_summary_memory_off_no_summary_job_runs_and_prompts_are_unchanged",
            "tests/backends/test_joyai_summary_memory.py::test_b29_two_overflows_while_a_job_runs_start_no_second_job",
            "tests/backends/test_joyai_summary_memory.py::test_b29_jobs_still_running_are_cancelled_when_the_stage_is_released",
            "tests/backends/test_joyai_summary_memory.py::test_b29_the_memory_is_bounded_in_sessions_and_characters",
            "tests/backends/test_joyai_summary_memory.py::test_b29_fewer_dropped_turns_than_a_batch_start_no_job",
            "tests/backends/test_joyai_summary_memory.py::test_b29_cut_at_sentence_keeps_whole_sentences_within_the_bound",
            "tests/backends/test_joyai_summary_memory.py::test_b29_the_remote_stage_summarises_through_the_same_servers",
            "tests/backends/test_joyai_summary_memory.py::test_b29_summary_settings_are_checked_in_both_config_files",
            "tests/backends/test_joyai_summary_memory.py::test_b29_alike_silent_ticks_are_told_apart_so_every_new_batch_is_summarised",
            "tests/backends/test_joyai_summary_memory.py::test_b29_through_the_runtime_a_session_is_summarised_under_its_own_id",
        ),
    ),
    Behaviour(
        id="B30",
        title="JoyAI stays silent before the first question and never repeats itself",
        summary=(
            "A turn without words while the session has never been asked anything (and set "
            "no instructions of its own) is decided `listen` without running the model; an "
            "answer identical (whitespace normalised) to the last spoken one, on a turn "
            "without a new question, is decided `listen` and never partly spoken. Both are "
            "JoyAI's serving rules, applied by the gpu and the remote VLM stage."
        ),
        sections=(_TICKS, _PIPELINE),
        rows=(RowRef("response", "listen"),),
        invariants=(),
        tests=(
            "tests/conformance/test_b29_b30_tick_history.py::test_b30_the_session_remembers_that_it_was_asked_before",
            "tests/backends/test_joyai_policy.py::test_b30_a_camera_tick_before_any_question_is_silent_without_running_the_model",
            "tests/backends/test_joyai_policy.py::test_b30_a_question_an_earlier_one_or_the_sessions_instructions_lift_the_silence",
            "tests/backends/test_joyai_policy.py::test_b30_an_exact_repeat_of_the_last_answer_is_a_listen_and_never_spoken",
            "tests/backends/test_joyai_policy.py::test_b30_an_answer_that_only_starts_like_the_last_one_streams_in_full",
            "tests/backends/test_joyai_policy.py::test_b30_a_repeated_question_is_answered_again",
            "tests/backends/test_joyai_policy.py::test_b30_the_previous_answer_is_the_last_one_spoken_past_silent_ticks",
            "tests/backends/test_joyai_policy.py::test_b30_a_different_answer_releases_held_deltas_in_order",
            "tests/backends/test_joyai_policy.py::test_b30_the_remote_stage_applies_both_rules",
            "tests/backends/test_joyai_golden_prompts.py::test_b30_the_first_camera_tick_of_a_session_is_never_sent_to_the_model",
        ),
    ),
    Behaviour(
        id="B31",
        title="A delegated question is answered by the background model as a follow-up response",
        summary=(
            "When the VLM delegates, its note is spoken and, if the server has a background "
            "model (`[delegation]`), the question goes to it; its answer is spoken as a new "
            "response the server creates, after any active one, never over it. An interrupt "
            "(barge-in, `response.cancel`, `output_audio_buffer.clear`) aborts the question and "
            "drops a late answer; a failure is `error delegation_failed` and the session goes "
            "on. Without a background model the question is dropped."
        ),
        sections=(_DELEGATION, _CANCEL, _FENCING),
        rows=(),
        invariants=("I1", "I2", "I4"),
        tests=(
            "tests/conformance/test_b31_delegation.py::test_b31_the_question_goes_to_the_background_model_with_the_conversation",
            "tests/conformance/test_b31_delegation.py::test_b31_an_answer_after_the_note_is_spoken_as_a_server_created_response",
            "tests/conformance/test_b31_delegation.py::test_b31_an_answer_waits_behind_the_active_response_never_over_it",
            "tests/conformance/test_b31_delegation.py::test_b31_user_input_deferred_meanwhile_goes_before_a_waiting_answer",
            "tests/conformance/test_b31_delegation.py::test_b31_barge_in_aborts_the_delegation_and_a_late_answer_is_dropped",
            "tests/conformance/test_b31_delegation.py::test_b31_response_cancel_drops_an_answer_that_was_waiting",
            "tests/conformance/test_b31_delegation.py::test_b31_response_cancel_with_only_a_delegation_open_aborts_it",
            "tests/conformance/test_b31_delegation.py::test_b31_a_background_failure_is_a_typed_error_and_nothing_else_changes",
            "tests/conformance/test_b31_delegation.py::test_b31_closing_the_session_aborts_the_delegation",
            "tests/conformance/test_b31_delegation.py::test_b31_without_a_background_model_the_question_is_dropped",
            "tests/conformance/test_b31_delegation.py::test_b31_a_text_only_session_shows_the_answer_as_text",
            "tests/runtime/test_delegation.py::test_b31_a_background_answer_is_spoken_as_a_follow_up_response",
            "tests/core/test_client_follow_up.py::test_b31_the_client_plays_and_shows_a_follow_up_reply_like_any_reply",
            "tests/runtime/test_delegation.py::test_b31_an_interrupt_aborts_the_delegation_and_its_late_answer_is_dropped",
            "tests/runtime/test_delegation.py::test_b31_an_endpoint_failure_is_a_typed_error_and_the_session_goes_on",
            "tests/runtime/test_delegation.py::test_b31_without_a_background_model_the_note_is_spoken_and_the_question_dropped",
        ),
    ),
    Behaviour(
        id="B32",
        title="semantic_vad ends a turn when the speaker has finished, not at every pause",
        summary=(
            "Silero still finds speech and pauses; a 200 ms pause goes under review by the "
            "end-of-turn model (Smart Turn v3.2 on the CPU backend), whose verdict ends the "
            "turn or holds it until speech resumes or the eagerness's maximum wait (8 / 4 / "
            "2 s) runs out; eagerness high asks after 64 ms and once more at 200 ms when "
            "the first verdict held the pause, and its early finish ends the turn only once "
            "the pause is 200 ms long; words heard up to the pause that cannot "
            "end a sentence hold it whatever the model says, and a verdict that comes "
            "before them waits for them at most its time budget; a verdict the speaker "
            "outran is dropped."
        ),
        sections=(_SEMANTIC_VAD, _VAD, _SESSION),
        rows=(
            RowRef("turn_detector", "pause"),
            RowRef("turn_detector", "finish"),
            RowRef("turn_detector", "hold"),
            RowRef("turn_detector", "review_again"),
            RowRef("turn_detector", "resume"),
            RowRef("turn_detector", "time_out"),
        ),
        invariants=("VAD-1", "VAD-2"),
        tests=(
            "tests/conformance/test_b32_semantic_vad.py::test_b32_a_pause_asks_the_end_of_turn_model_about_the_utterance_so_far",
            "tests/conformance/test_b32_semantic_vad.py::test_b32_a_finished_verdict_ends_the_turn_and_commits_it",
            "tests/conformance/test_b32_semantic_vad.py::test_b32_an_unfinished_verdict_holds_the_turn_until_speech_resumes",
            "tests/conformance/test_b32_semantic_vad.py::test_b32_a_verdict_the_speaker_outran_is_dropped",
            "tests/conformance/test_b32_semantic_vad.py::test_b32_a_verdict_after_a_commit_or_clear_is_dropped",
            "tests/conformance/test_b32_semantic_vad.py::test_b32_a_held_pause_ends_at_the_max_wait_on_the_audio_clock",
            "tests/conformance/test_b32_semantic_vad.py::test_b32_a_held_pause_ends_at_the_max_wait_on_the_session_clock",
            "tests/conformance/test_b32_semantic_vad.py::test_b32_eagerness_sets_the_verdict_threshold_and_the_max_wait",
            "tests/conformance/test_b32_semantic_vad.py::test_b32_without_a_verdict_a_pause_ends_as_server_vad_would",
            "tests/conformance/test_b32_semantic_vad.py::test_b32_a_late_missing_verdict_ends_an_overdue_pause_at_once",
            "tests/conformance/test_b32_semantic_vad.py::test_b32_semantic_vad_still_interrupts_a_reply_when_speech_starts",
            "tests/conformance/test_b32_semantic_vad.py::test_b32_the_review_names_the_partial_asked_for_the_same_pause",
            "tests/conformance/test_b32_semantic_vad.py::test_b32_pause_words_that_trail_off_hold_a_pause_the_model_calls_finished",
            "tests/conformance/test_b32_semantic_vad.py::test_b32_an_unpunctuated_pause_holds_only_when_the_asr_punctuates",
            "tests/conformance/test_b32_semantic_vad.py::test_b32_finished_words_never_end_a_pause_the_model_holds",
            "tests/conformance/test_b32_semantic_vad.py::test_b32_finished_words_and_a_finished_sound_end_the_turn",
            "tests/conformance/test_b32_semantic_vad.py::test_b32_a_verdict_before_its_pauses_words_waits_for_them",
            "tests/conformance/test_b32_semantic_vad.py::test_b32_the_words_a_verdict_waits_for_come_at_most_within_its_budget",
            "tests/conformance/test_b32_semantic_vad.py::test_b32_words_already_heard_go_with_the_verdict_at_once",
            "tests/conformance/test_b32_semantic_vad.py::test_b32_a_failed_partial_leaves_the_verdict_to_decide_alone",
            "tests/conformance/test_b32_semantic_vad.py::test_b32_a_verdict_that_waits_is_dropped_when_speech_resumes",
            "tests/conformance/test_b32_semantic_vad.py::test_b32_high_eagerness_asks_after_64_ms_and_a_held_pause_again_at_200_ms",
            "tests/conformance/test_b32_semantic_vad.py::test_b32_a_held_pause_is_asked_again_only_once_and_only_when_first_asked_early",
            "tests/conformance/test_b32_semantic_vad.py::test_b32_an_eager_finish_ends_the_turn_once_the_pause_is_as_long_as_the_models",
            "tests/conformance/test_b32_semantic_vad.py::test_b32_speech_inside_an_eager_finishs_wait_was_a_comma_and_the_turn_goes_on",
            "tests/conformance/test_b32_semantic_vad.py::test_b32_a_comma_whose_next_words_are_scored_late_is_not_cut_by_the_session_clock",
            "tests/backends/test_cpu_smart_turn.py::test_b32_a_cpu_without_avx512_gives_the_same_verdict",
            "tests/backends/test_cpu_smart_turn.py::test_b32_whisper_hears_the_words_before_the_pause_trail_off_after_if",
            "tests/backends/test_cpu_smart_turn.py::test_b32_smart_turn_holds_the_real_speakers_last_two_pauses_and_ends_his_sentence",
            "tests/spec/test_trailing_transcript.py::test_b32_words_that_cannot_close_a_sentence_trail_off",
            "tests/spec/test_trailing_transcript.py::test_b32_a_closed_sentence_does_not_trail_off",
            "tests/spec/test_trailing_transcript.py::test_b32_a_missing_closing_mark_trails_off_only_from_an_asr_that_punctuates",
            "tests/runtime/test_live_transcripts.py::test_b32_the_verdict_weighs_the_words_the_pause_partial_heard",
            "tests/runtime/test_live_transcripts.py::test_b32_a_pause_while_a_cadence_partial_runs_still_reaches_the_verdict_with_its_words",
            "tests/backends/test_cpu_smart_turn.py::test_b32_smart_turn_alone_ends_the_turn_in_a_pause_after_tell_me_if",
            "tests/backends/test_cpu_smart_turn.py::test_b32_through_the_real_server_a_pause_after_words_that_trail_off_holds_semantic_vad",
            "tests/backends/test_cpu_smart_turn.py::test_b32_a_real_speakers_pauses_inside_his_sentence_split_only_server_vad_turns",
            "tests/spec/test_session_config.py::test_b32_semantic_vad_is_accepted_with_its_eagerness_and_echoed_as_given",
            "tests/spec/test_session_config.py::test_b32_server_vad_has_no_end_of_turn_policy_and_echoes_no_eagerness",
            "tests/backends/test_cpu_smart_turn.py::test_b32_a_mid_sentence_pause_ends_the_turn_under_server_vad_but_not_semantic_vad",
            "tests/backends/test_cpu_smart_turn.py::test_b32_the_end_of_a_complete_sentence_ends_the_turn_under_semantic_vad",
            "tests/backends/test_cpu_smart_turn.py::test_b32_through_the_real_server_a_mid_sentence_pause_splits_only_a_server_vad_turn",
            "tests/backends/test_cpu_smart_turn.py::test_b32_predict_runs_off_the_loop_and_answers_a_probability",
            "tests/backends/test_cpu_smart_turn.py::test_b32_the_packaged_smart_turn_model_has_the_pinned_sha256",
            "tests/backends/test_cpu_smart_turn.py::test_b32_a_turn_model_with_another_digest_is_unavailable_and_says_how_to_install",
            "tests/backends/test_cpu_smart_turn.py::test_b32_a_missing_configured_turn_model_never_falls_back",
            "tests/backends/test_cpu_smart_turn.py::test_b32_a_missing_pipecat_package_says_how_to_install",
            "tests/backends/test_cpu_smart_turn.py::test_b32_the_window_is_the_last_8_s_zero_padded_in_front",
            "tests/backends/test_cpu_smart_turn.py::test_b32_log_mel_matches_faster_whispers_whisper_features",
            "tests/backends/test_cpu_smart_turn.py::test_b32_log_mel_matches_the_extractor_smart_turn_ships_with",
            "tests/runtime/test_session_runner.py::test_b32_semantic_vad_turn_with_scripted_end_of_turn_verdicts",
            "tests/runtime/test_session_runner.py::test_b32_without_an_end_of_turn_model_semantic_vad_ends_pauses_as_server_vad",
            "tests/web/test_web_runtimes_agree.py::test_b32_the_ui_offers_semantic_vad_at_each_eagerness",
        ),
    ),
    Behaviour(
        id="B33",
        title="Live transcripts while the person speaks",
        summary=(
            "Under server or semantic VAD, with an ASR that offers it, the growing "
            "utterance is transcribed at each pause, from its first silent frame (under "
            "semantic VAD while the end-of-turn model reviews it), and on a cadence (one "
            "at a time; a pause's partial supersedes a cadence one still out) and its new "
            "words are sent as `conversation.item.input_audio_transcription.delta`; the "
            "`completed` event stays the item's text, and a turn the detector ends in the "
            "pause a partial heard takes that partial's words as its transcript, without a "
            "second ASR (one that failed leaves the commit its own)."
        ),
        sections=(_LIVE, _VAD),
        rows=(),
        invariants=("I11",),
        tests=(
            "tests/conformance/test_b33_b34_live_text.py::test_b33_a_pause_asks_for_the_utterance_so_far_and_new_words_become_deltas",
            "tests/conformance/test_b33_b34_live_text.py::test_b33_on_a_cadence_while_speech_goes_on_with_at_most_one_in_flight",
            "tests/conformance/test_b33_b34_live_text.py::test_b33_a_partial_answering_after_its_utterance_ended_is_dropped",
            "tests/conformance/test_b33_b34_live_text.py::test_b33_no_partial_when_the_asr_offers_none",
            "tests/conformance/test_b33_b34_live_text.py::test_b33_a_pause_under_semantic_review_is_transcribed_while_the_model_decides",
            "tests/conformance/test_b33_b34_live_text.py::test_b33_a_held_semantic_pause_sends_its_partial_as_live_text",
            "tests/conformance/test_b33_b34_live_text.py::test_b33_a_pause_supersedes_a_cadence_partial_still_out_and_the_review_names_it",
            "tests/conformance/test_b33_b34_live_text.py::test_b33_under_server_vad_a_pause_supersedes_a_cadence_partial_for_its_commit",
            "tests/conformance/test_b33_b34_live_text.py::test_b33_a_pause_does_not_supersede_a_pause_partial_still_out",
            "tests/conformance/test_b33_b34_live_text.py::test_b33_a_commit_of_audio_a_partial_already_heard_takes_its_text",
            "tests/conformance/test_b33_b34_live_text.py::test_b33_a_partial_that_failed_leaves_the_commit_its_own_asr",
            "tests/conformance/test_b33_b34_live_text.py::test_b33_a_commit_of_other_audio_is_transcribed_at_once",
            "tests/conformance/test_b33_b34_live_text.py::test_b33_a_response_cancelled_while_its_asr_waits_for_a_partial_sends_none",
            "tests/conformance/test_b33_b34_live_text.py::test_b33_a_client_commit_in_a_pause_is_transcribed_on_its_own",
            "tests/runtime/test_live_transcripts.py::test_b33_live_deltas_reach_the_client_before_the_completed_transcript",
            "tests/runtime/test_live_transcripts.py::test_b33_without_partials_from_the_asr_no_delta_is_sent",
        ),
    ),
    Behaviour(
        id="B34",
        title="An interrupted reply keeps its text, marking what was heard",
        summary=(
            "A reply cut before the client reported how much it played closes with the "
            "whole transcript sent, never an empty one; once a played position is known, "
            "history holds the heard prefix. The web UI keeps the streamed text and marks "
            "the part that was not played."
        ),
        sections=(_PLAYBACK, _CANCEL),
        rows=(RowRef("playback", "clear"), RowRef("playback", "ack")),
        invariants=("I8",),
        tests=(
            "tests/conformance/test_b33_b34_live_text.py::test_b34_a_reply_cut_before_the_client_reported_playback_keeps_the_text_it_sent",
            "tests/conformance/test_b33_b34_live_text.py::test_b34_a_late_played_position_cuts_the_reply_in_history_to_what_was_heard",
            "tests/conformance/test_b33_b34_live_text.py::test_b34_a_reply_cut_after_a_playback_report_keeps_the_played_prefix",
            "tests/conformance/test_b33_b34_live_text.py::test_b34_speech_during_a_reply_without_a_report_keeps_the_text_sent",
            "tests/web/test_browser_e2e.py::test_b34_barge_in_during_generation_keeps_the_reply_text_and_marks_the_unheard_rest",
        ),
    ),
    Behaviour(
        id="B35",
        title="A reply prepared during a pause reaches the client only as the turn ends",
        summary=(
            "With live transcripts, the words of a pause start the turn's reply before the "
            "turn has ended (preemptive response): its VLM and TTS run and their results "
            "are held, never sent. When the turn ends on the same prompt (words, frames, "
            "history) the response adopts it and the client gets the events, ids and order "
            "it would have seen without it, at once; speech after the pause, another "
            "prompt, a failure, a clear, a cancel or the close discard it silently, its "
            "requests aborted. At most one at a time; a session switch turns it off."
        ),
        sections=(_PREEMPTION, _D40, _LIVE),
        rows=(RowRef("speculation", "adopt"), RowRef("speculation", "discard")),
        invariants=("P1", "P2", "P3"),
        tests=(
            "tests/conformance/test_b35_preemptive_response.py::test_b35_words_that_speech_outran_prepare_no_reply",
            "tests/conformance/test_b35_preemptive_response.py::test_b35_a_reply_prepared_in_the_pause_is_adopted_with_the_events_the_client_would_see",
            "tests/conformance/test_b35_preemptive_response.py::test_b35_results_that_come_after_the_turn_ended_stream_to_the_adopted_response",
            "tests/conformance/test_b35_preemptive_response.py::test_b35_speech_after_the_pause_discards_the_prepared_reply_silently",
            "tests/conformance/test_b35_preemptive_response.py::test_b35_a_frame_that_arrives_before_the_turn_ends_discards_it_and_starts_afresh",
            "tests/conformance/test_b35_preemptive_response.py::test_b35_other_words_at_the_turn_end_discard_the_prepared_reply",
            "tests/conformance/test_b35_preemptive_response.py::test_b35_a_failed_preparation_is_dropped_and_the_turn_asks_afresh_without_an_error",
            "tests/conformance/test_b35_preemptive_response.py::test_b35_the_session_switch_turns_it_off",
            "tests/conformance/test_b35_preemptive_response.py::test_b35_no_reply_is_prepared_while_a_response_is_active",
            "tests/conformance/test_b35_preemptive_response.py::test_b35_a_turn_that_creates_no_response_prepares_none",
            "tests/conformance/test_b35_preemptive_response.py::test_b35_clear_and_close_discard_the_prepared_reply",
            "tests/stateful/test_preemption_is_invisible.py::test_b35_a_session_with_preemption_shows_the_wire_of_the_reference_model",
            "tests/stateful/test_preemption_is_invisible.py::test_b35_the_programs_reach_an_adopted_and_a_discarded_reply",
            "tests/runtime/test_preemption_runner.py::test_b35_a_reply_prepared_in_the_pause_is_the_turns_reply",
            "tests/runtime/test_preemption_runner.py::test_b35_speech_after_the_pause_drops_the_prepared_reply",
        ),
    ),
    Behaviour(
        id="B36",
        title="A WebRTC call is the same session, its reply played by the server",
        summary=(
            "`POST /v1/realtime/calls` answers an offer with 201 and the SDP answer after "
            "the origin, key and admission checks (refusals are HTTP with the wire's error "
            "object). Events ride the `oai-events` data channel, the microphone and camera "
            "ride media tracks, and reply audio goes out on the answer's track, paced in "
            "real time: `output_audio_buffer.started` with its first frame, `.stopped` "
            "after `response.done` and its last sample, none after a clear; what was sent "
            "is the played position a barge-in truncates to. A call whose peer never "
            "connects or goes away frees its slot; a sideband websocket can watch and drive it."
        ),
        sections=(_CALLS, _D42, _PLAYBACK),
        rows=(
            RowRef("output_audio_buffer", "start"),
            RowRef("output_audio_buffer", "follow"),
            RowRef("output_audio_buffer", "stop"),
            RowRef("output_audio_buffer", "clear"),
        ),
        invariants=("O1", "O2", "O3", "O4"),
        tests=(
            "tests/conformance/test_b36_calls.py::test_b36_a_barge_in_on_a_call_keeps_what_its_track_sent",
            "tests/conformance/test_b36_calls.py::test_b36_a_ptt_call_sends_its_microphone_track_only_inside_a_hold",
            "tests/conformance/test_b36_calls.py::test_b36_a_hands_free_call_stops_its_microphone_track_while_muted",
            "tests/core/test_output_audio_buffer.py::test_b36_started_goes_out_with_a_responses_first_paced_frame",
            "tests/core/test_output_audio_buffer.py::test_b36_stopped_waits_for_response_done_and_the_last_sample",
            "tests/core/test_output_audio_buffer.py::test_b36_a_clear_ends_playing_without_a_stop",
            "tests/core/test_output_audio_buffer.py::test_b36_a_clear_of_another_response_keeps_the_playing_one",
            "tests/core/test_output_audio_buffer.py::test_b36_a_response_that_follows_another_stops_it_and_starts_itself",
            "tests/core/test_output_audio_buffer.py::test_b36_the_played_position_never_passes_what_was_generated",
            "tests/core/test_output_audio_buffer.py::test_b36_kept_positions_are_bounded",
            "tests/core/test_output_audio_buffer.py::test_b36_random_pacing_keeps_the_output_buffer_invariants",
            "tests/transport/test_webrtc_calls.py::test_b36_a_spoken_turn_over_a_call_equals_the_websockets",
            "tests/transport/test_webrtc_calls.py::test_b36_the_answer_is_201_sdp_with_the_calls_location",
            "tests/transport/test_webrtc_calls.py::test_b36_a_clear_keeps_in_history_only_the_audio_actually_sent",
            "tests/transport/test_webrtc_calls.py::test_b36_the_camera_track_reaches_the_frame_path",
            "tests/transport/test_webrtc_calls.py::test_b36_the_offers_session_object_configures_the_session",
            "tests/transport/test_webrtc_calls.py::test_b36_an_offer_that_cannot_be_used_is_refused_400",
            "tests/transport/test_webrtc_calls.py::test_b36_key_origin_and_capacity_are_checked_before_any_media",
            "tests/transport/test_webrtc_calls.py::test_b36_a_call_whose_peer_never_connects_frees_its_slot",
            "tests/transport/test_webrtc_calls.py::test_b36_a_call_whose_peer_goes_away_frees_its_slot",
            "tests/transport/test_webrtc_calls.py::test_b36_hangup_ends_the_call",
            "tests/transport/test_webrtc_calls.py::test_b36_a_sideband_websocket_sees_the_calls_events_and_drives_it",
            "tests/transport/test_webrtc_calls.py::test_b36_a_sideband_that_reaches_another_worker_is_relayed_to_the_call",
            "tests/transport/test_openai_compatibility.py::test_b36_the_openai_sdk_places_a_call",
            "tests/transport/test_openai_compatibility.py::test_b36_the_openai_sdk_sends_the_session_with_the_offer",
        ),
    ),
)
