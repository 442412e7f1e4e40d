"""The behaviour catalogue, B1-B14: each entry as data (see `spec.behaviours`)."""

from __future__ import annotations

from spec.behaviour_catalogue.entry import Behaviour, RowRef
from spec.behaviour_catalogue.sections import (
    _APPEND,
    _CANCEL,
    _COMMIT,
    _FENCING,
    _HISTORY,
    _ITEMS,
    _PIPELINE,
    _VAD,
)

__all__ = ["BEHAVIOURS"]

BEHAVIOURS: tuple[Behaviour, ...] = (
    Behaviour(
        id="B1",
        title="Profiles route each input to the stages it needs",
        summary=(
            "A speech commit (speech profile) goes ASR -> VLM -> TTS; camera and text input, "
            "and everything in the camera profile, skip the ASR and enter the VLM directly."
        ),
        sections=(_PIPELINE, _COMMIT),
        rows=(
            RowRef("commit", "adopt"),
            RowRef("commit", "route_asr", "pending"),
            RowRef("commit", "route_vlm", "pending"),
            RowRef("item", "complete"),
            RowRef("response", "transcribe"),
            RowRef("response", "generate"),
            RowRef("response", "speak"),
        ),
        invariants=(),
        tests=(
            "tests/conformance/test_b01_b04_pipeline.py::test_b1_speech_commit_goes_asr_then_vlm_then_tts",
            "tests/conformance/test_b01_b04_pipeline.py::test_b1_camera_commit_without_speech_skips_asr",
            "tests/conformance/test_b01_b04_pipeline.py::test_b1_text_item_skips_asr",
            "tests/conformance/test_b01_b04_pipeline.py::test_b1_camera_profile_never_runs_asr",
            "tests/conformance/test_b01_b04_pipeline.py::test_b1_the_first_tts_piece_ends_at_a_clause_later_pieces_at_sentences",
            "tests/conformance/test_b01_b04_pipeline.py::test_b1_a_dash_between_spaces_ends_the_first_clause",
        ),
    ),
    Behaviour(
        id="B2",
        title="Visual input stays raw until the VLM",
        summary=(
            "Frames stay the client's JPEG/PNG bytes up to the VLM request, in capture order; "
            "no ASR request ever carries a frame."
        ),
        sections=(_PIPELINE,),
        rows=(RowRef("response", "generate"),),
        invariants=(),
        tests=(
            "tests/conformance/test_b01_b04_pipeline.py::test_b2_frames_stay_raw_until_the_vlm_and_never_reach_the_asr",
            "tests/backends/test_gpu_runtime_turns.py::test_b2_speech_profile_spoken_turn_with_a_frame_then_camera_turn",
        ),
    ),
    Behaviour(
        id="B3",
        title="The prompt context is system, history, transcript and frames",
        summary=(
            "The VLM sees the instructions, the completed history, this turn's transcript and "
            "its frames; a malformed prompt context fails only its own response."
        ),
        sections=(_PIPELINE,),
        rows=(RowRef("response", "generate"), RowRef("response", "fail")),
        invariants=(),
        tests=(
            "tests/conformance/test_b01_b04_pipeline.py::test_b3_prompt_is_system_history_transcript_and_frames",
            "tests/conformance/test_b01_b04_pipeline.py::test_b3_malformed_client_context_is_refused_where_it_enters_and_the_session_lives_on",
            "tests/conformance/test_b01_b04_pipeline.py::test_b3_malformed_instructions_are_refused_when_the_event_is_decoded",
            "tests/conformance/test_b01_b04_pipeline.py::test_b3_a_prompt_the_vlm_stage_cannot_serve_fails_only_its_response",
            "tests/core/test_prompt_contents.py::test_b3_system_items_enter_history_as_system_turns",
        ),
    ),
    Behaviour(
        id="B4",
        title="Transcripts are written back to their user item",
        summary=(
            "A transcript completes the user item whose audio produced it and stays user input "
            "in later turns; it never becomes assistant output."
        ),
        sections=(_PIPELINE, _HISTORY),
        rows=(RowRef("item", "transcribe"), RowRef("commit", "transcribe")),
        invariants=("I7",),
        tests=(
            "tests/conformance/test_b01_b04_pipeline.py::test_b4_transcript_is_written_to_its_item_and_stays_user_input_for_camera_turns",
            "tests/core/test_prompt_contents.py::test_b4_typed_text_and_spoken_audio_of_one_item_reach_the_vlm_in_content_order",
        ),
    ),
    Behaviour(
        id="B5",
        title="Item versions: a transcript reaches only the version that produced it",
        summary=(
            "An item id deleted and created again is a new version; a transcript of the old "
            "version is dropped and the new version accepts only its own."
        ),
        sections=(_ITEMS, _PIPELINE),
        rows=(
            RowRef("item", "transcribe"),
            RowRef("item", "delete"),
            RowRef("commit", "withdraw"),
        ),
        invariants=("I7", "ITEM-1"),
        tests=(
            "tests/conformance/test_b05_b08_commits.py::test_b5_old_versions_transcript_is_dropped_and_the_new_version_accepts_its_own",
            "tests/core/test_prompt_contents.py::test_b5_a_segment_deleted_while_asr_runs_adds_nothing_to_the_prompt",
        ),
    ),
    Behaviour(
        id="B6",
        title="A quiet commit is acknowledged with no_response and answered by listening",
        summary=(
            "A commit without speech or frames is acknowledged with `no_response: true` and "
            "its event id, then `response.listen`; nothing else changes."
        ),
        sections=(_COMMIT,),
        rows=(RowRef("commit", "quiet"),),
        invariants=("I3",),
        tests=(
            "tests/conformance/test_b05_b08_commits.py::test_b6_quiet_commit_acks_no_response_with_its_event_id_then_listens",
            "tests/conformance/test_b05_b08_commits.py::test_b6_quiet_commit_leaves_other_commits_and_the_active_response_untouched",
            "tests/conformance/test_b05_b08_commits.py::test_b6_quiet_commit_after_response_done_before_drain_keeps_playback_state",
        ),
    ),
    Behaviour(
        id="B7",
        title="An empty commit is refused and changes nothing",
        summary=(
            "A commit with nothing appended since the last commit or clear is refused with "
            "`input_audio_buffer_empty` carrying its event id."
        ),
        sections=(_COMMIT,),
        rows=(RowRef("input_buffer", "clear"),),
        invariants=("I3",),
        tests=(
            "tests/conformance/test_b05_b08_commits.py::test_b7_empty_commit_is_refused_with_its_event_id_and_changes_nothing",
            "tests/conformance/test_b05_b08_commits.py::test_b7_commit_after_clear_is_empty",
        ),
    ),
    Behaviour(
        id="B8",
        title="A silent camera commit goes straight to the VLM and releases its bytes",
        summary=(
            "A commit with frames but no speech enters the VLM without ASR; its bytes are "
            "released when the VLM request is sent."
        ),
        sections=(_PIPELINE,),
        rows=(RowRef("commit", "route_vlm", "pending"),),
        invariants=("I5",),
        tests=(
            "tests/conformance/test_b05_b08_commits.py::test_b8_silent_camera_commit_enters_the_vlm_directly_and_releases_its_bytes",
        ),
    ),
    Behaviour(
        id="B9",
        title="With interrupt_response false, speech during a reply waits for it",
        summary=(
            "`interrupt_response: false` is a valid session; speech during a reply does not "
            "cancel it, and its commit is deferred until the reply ends."
        ),
        sections=(_COMMIT, _VAD),
        rows=(RowRef("commit", "defer"),),
        invariants=("I1",),
        tests=(
            "tests/conformance/test_b09_b11_vad_and_barge_in.py::test_b9_interrupt_response_false_speech_during_a_reply_does_not_cancel_and_waits",
            "tests/spec/test_session_config.py::test_b9_interrupt_response_false_is_valid",
            "tests/spec/test_session_config.py::test_b9_invalid_turn_detection_is_refused_with_its_param",
            "tests/web/test_web_runtimes_agree.py::test_b09_ui_session_payload_passes_the_public_validator",
        ),
    ),
    Behaviour(
        id="B10",
        title="Server VAD segments turns from frame probabilities",
        summary=(
            "Appends are scored in 32 ms frames; speech starts after min_speech_duration_ms "
            "(minus prefix padding) and ends only below threshold - 0.15 after the silence "
            "duration, which commits the utterance."
        ),
        sections=(_VAD,),
        rows=(
            RowRef("turn_detector", "start"),
            RowRef("turn_detector", "stop"),
            RowRef("turn_detector", "reset"),
            RowRef("input_buffer", "start_capture"),
        ),
        invariants=("VAD-1",),
        tests=(
            "tests/conformance/test_b09_b11_vad_and_barge_in.py::test_b10_appends_are_scored_and_speech_starts_after_min_speech_with_prefix_padding",
            "tests/conformance/test_b09_b11_vad_and_barge_in.py::test_b10_speech_ends_only_below_threshold_minus_015_after_the_silence_duration",
            "tests/conformance/test_b09_b11_vad_and_barge_in.py::test_b10_turn_mode_stop_commits_and_creates_a_response",
            "tests/conformance/test_b09_b11_vad_and_barge_in.py::test_b10_one_append_holding_two_utterances_makes_two_items_losing_no_audio",
            "tests/conformance/test_b09_b11_vad_and_barge_in.py::test_b10_stop_without_create_response_retains_the_utterance",
            "tests/backends/test_cpu_vad.py::test_b10_sequences_of_unequal_length_score_as_each_session_alone",
            "tests/backends/test_scripted_backend.py::test_b10_vad_batcher_scores_concurrent_sessions_frames_in_one_call",
            "tests/runtime/test_vad_batcher.py::test_b10_sessions_queued_within_one_tick_are_scored_in_one_call",
            "tests/runtime/test_vad_batcher.py::test_b10_a_cancelled_leader_still_answers_everyone_who_joined",
            "tests/runtime/test_vad_batcher.py::test_b10_a_cancelled_waiter_leaves_the_queue_and_passes_the_lead_on",
            "tests/runtime/test_session_runner.py::test_b10_appends_and_heartbeats_do_not_wait_for_the_vad_but_a_commit_does",
        ),
    ),
    Behaviour(
        id="B11",
        title="Barge-in, cancel and fencing",
        summary=(
            "Speech start or a cancel ends the active reply with one `response.done` and clears "
            "its audio; nothing of a cancelled response or an older epoch is emitted afterwards."
        ),
        sections=(_CANCEL, _FENCING, _VAD),
        rows=(
            RowRef("turn_detector", "start"),
            RowRef("response", "cancel"),
            RowRef("playback", "clear"),
            RowRef("commit", "fail"),
            RowRef("item", "fail_transcription"),
        ),
        invariants=("I2", "I4"),
        tests=(
            "tests/conformance/test_b09_b11_vad_and_barge_in.py::test_b11_speech_start_during_a_reply_cancels_it_with_one_done_and_a_clear",
            "tests/conformance/test_b09_b11_vad_and_barge_in.py::test_b11_speech_start_after_generation_with_audio_playing_clears_without_second_done",
            "tests/conformance/test_b09_b11_vad_and_barge_in.py::test_b11_nothing_of_a_cancelled_response_is_emitted_afterwards",
            "tests/conformance/test_b09_b11_vad_and_barge_in.py::test_b11_response_cancel_during_a_reply_and_after_it_while_audio_plays",
            "tests/core/test_prompt_contents.py::test_b11_cancelled_response_closes_its_assistant_item_as_completed",
            "tests/core/test_session_paths.py::test_b11_cancel_naming_an_older_still_playing_reply_clears_it_alone",
            "tests/core/test_session_paths.py::test_b11_a_cancel_fails_waiting_transcriptions_as_commit_aborted",
            "tests/core/test_session_paths.py::test_b11_clearing_an_older_reply_keeps_the_epoch_of_the_active_one",
            "tests/web/test_browser_e2e.py::test_b11_vad_mode_shows_transcript_plays_reply_and_barge_in_silences_playback",
        ),
    ),
    Behaviour(
        id="B12",
        title="Idle retention keeps memory flat",
        summary=(
            "While idle the input buffer keeps only the latest frame and 500 ms of pre-roll "
            "audio; from speech start it keeps the whole utterance until commit."
        ),
        sections=(_APPEND,),
        rows=(RowRef("input_buffer", "start_capture"), RowRef("input_buffer", "take")),
        invariants=("I5", "I6"),
        tests=(
            "tests/conformance/test_b12_b16_input_and_segments.py::test_b12_idle_camera_session_keeps_only_the_latest_frame_and_preroll",
            "tests/conformance/test_b12_b16_input_and_segments.py::test_b12_from_speech_start_the_whole_utterance_is_kept_until_commit",
        ),
    ),
    Behaviour(
        id="B13",
        title="Backpressure on pending bytes and pending commits",
        summary=(
            "An append over max_pending_input_bytes or a commit beyond max_pending_commits is "
            "refused with `input_backpressure` and its event id; commit, response and clear "
            "make room again."
        ),
        sections=(_APPEND, _COMMIT),
        rows=(RowRef("input_buffer", "clear"),),
        invariants=("I5", "COMMIT-1"),
        tests=(
            "tests/conformance/test_b12_b16_input_and_segments.py::test_b13_append_over_the_cap_is_backpressure_with_event_id_and_buffer_untouched",
            "tests/conformance/test_b12_b16_input_and_segments.py::test_b13_clear_frees_room_for_appends_again",
            "tests/conformance/test_b12_b16_input_and_segments.py::test_b13_commits_beyond_the_pending_cap_get_backpressure",
        ),
    ),
    Behaviour(
        id="B14",
        title="Retained speech and a later camera-only commit are answered together",
        summary=(
            "A speech commit without a response is retained; a later camera-only commit that "
            "asks for one starts a response with both, keeping the PCM and concatenating the "
            "frames, also when it waits behind an active response."
        ),
        sections=(_COMMIT, _PIPELINE),
        rows=(
            RowRef("commit", "retain"),
            RowRef("commit", "route_asr", "retained"),
            RowRef("commit", "route_vlm", "retained"),
        ),
        invariants=(),
        tests=(
            "tests/conformance/test_b12_b16_input_and_segments.py::test_b14_manual_four_step_sequence_keeps_the_pcm_and_concatenates_frames",
            "tests/conformance/test_b12_b16_input_and_segments.py::test_b14_the_same_merge_while_deferred_behind_an_active_response",
        ),
    ),
)
