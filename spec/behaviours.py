"""The behaviour catalogue: B1..B42 as data.

Each behaviour names, directly, everything that makes it true: the sections of
`docs/session-semantics.md` that explain it, the state-table rows (`spec/tables`) and the
invariants that enforce it, and the tests (pytest node ids) that prove it. Table rows name
the behaviours they serve too (`T.behaviours`); `tests/spec/test_behaviours.py` keeps the
two directions in agreement and checks that every row, invariant, section and test named
here exists. `docs/behaviours.md` is generated from this module (`make docs`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from spec.tables import TABLES
from spec.tables.client_constants import CLIENT_TABLES

if TYPE_CHECKING:
    from spec.tables import T, Table

__all__ = [
    "ALL_TABLES",
    "BEHAVIOURS",
    "BEHAVIOUR_IDS",
    "SEMANTICS",
    "SESSION_INVARIANTS",
    "Behaviour",
    "RowRef",
    "behaviour",
    "invariant_text",
    "rows_of",
    "table_named",
]

#: the document every `sections` entry is a heading of
SEMANTICS: Final = "docs/session-semantics.md"

#: every machine table, the server's and the client's
ALL_TABLES: tuple[Table, ...] = (*TABLES, *CLIENT_TABLES)

#: the observable invariants of a session (docs/session-semantics.md section 8); the tables
#: repeat the ones a single machine enforces under the same ids
SESSION_INVARIANTS: Final[dict[str, str]] = {
    "I1": "at most one active response",
    "I2": "nothing of a cancelled/failed response or an older epoch is emitted after its "
    "response.done",
    "I3": "every accepted commit gets exactly one input_audio_buffer.committed carrying its "
    "client event id; a rejected one exactly one error with its event id",
    "I4": "every response.created is followed by exactly one response.done for that id "
    "(unless the session closed)",
    "I5": "pending bytes never exceed max_pending_input_bytes",
    "I6": "an idle input buffer holds at most one frame and at most PREROLL_MS of audio plus "
    "one append",
    "I7": "a transcript is only written to the item version that produced it",
    "I8": "played_ms <= generated_ms for every response",
    "I9": "nothing is emitted after session.closed",
    "I10": "a connection refused for its key or origin never reaches a session: it is "
    "answered with HTTP 401 or 403 and never upgraded",
    "I11": "at most two live-transcript requests are out per session (a pause's partial "
    "may supersede a cadence one, whose answer is dropped), and a transcription delta "
    "only names the utterance still being spoken",
    "I12": "a refused session.update changes nothing: the tools and tool choice a session "
    "offers its model are the ones its last session.updated echoed",
}


@dataclass(frozen=True, slots=True)
class RowRef:
    """Rows of one table: those of `trigger`, or only those leaving `source` (a state's
    wire value) when it is given."""

    machine: str
    trigger: str
    source: str | None = None


@dataclass(frozen=True, slots=True)
class Behaviour:
    """One behaviour: what it is, where it is explained, what enforces and proves it."""

    id: str
    title: str
    summary: str
    #: headings of docs/session-semantics.md, the main one first
    sections: tuple[str, ...]
    #: the state-table rows that carry it out
    rows: tuple[RowRef, ...]
    #: invariant ids (SESSION_INVARIANTS or a table's invariants)
    invariants: tuple[str, ...]
    #: pytest node ids, `path::function`, conformance tests first
    tests: tuple[str, ...]


# headings of docs/session-semantics.md
_APPEND = "2.1 append (`input_audio_buffer.append`)"
_COMMIT = "2.3 commit (`input_audio_buffer.commit`, alias `input.commit`)"
_ITEMS = "2.4 items"
_CREATE = "3.1 Starting a response (`response.create`)"
_PIPELINE = "3.2 The pipeline: ASR, VLM, TTS (B1-B4, B8)"
_CANCEL = "3.3 Cancel, clear and barge-in (B11)"
_FAILURE = "3.4 Stage failure (B17, B18)"
_FENCING = "3.5 Fencing (B11)"
_HISTORY = "4. Transcripts and history"
_TICKS = "4.1 History in tick form (B29, B30)"
_VAD = "5. Server VAD (B10)"
_LIVE = "5.2 Live transcripts (B33)"
_MANUAL_LIVE = "5.3 Live transcripts of a manual turn (B41)"
_D44 = "D44 When a push-to-talk hold's pause words are its commit's transcript (5.3, 5.2)"
_PLAYBACK = "6. Playback (B19)"
_SESSION = "7. Session"
_HOLDS = "9.1 Push-to-talk holds (B20)"
_CLIENT_PLAYBACK = "9.2 Client playback (B21)"
_MODES = "9.3 Modes and camera (B22)"
_WATCHDOG = "9.4 Turn watchdog (B23)"
_LIMITS = "10. Isolation and limits (B24, B25)"
_RESUME = "7.1 Resume (B27)"
_D27 = "D27 Which sessions are resumable (7.1)"
_D28 = "D28 What detaches a session, and what follows a resync (7.1)"
_D39 = "D39 Which worker process serves a resume (7.1)"
_EXPOSURE = "10.1 Exposure: keys, origins, probes (B26)"
_DELEGATION = "3.6 Delegation (B31)"
_SEMANTIC_VAD = "5.1 Semantic VAD (B32)"
_PREEMPTION = "3.7 Preemptive response (B35)"
_FUNCTIONS = "3.8 Function calls (B37-B40)"
_D40 = "D40 What a preemptive response may change (3.7)"
_CALLS = "10.2 WebRTC calls (B36)"
_CLIENT_RESUME = "9.5 Resume through a network drop (B42)"
_CALL_RESUME = "10.3 Resuming a call through a network change (B42)"
_D42 = "D42 What a WebRTC call reports as played (10.2, 6)"


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
    Behaviour(
        id="B15",
        title="Every commit gets exactly one terminal acknowledgement carrying its event id",
        summary=(
            "Committed, no_response or an error: exactly one answer per commit, with the "
            "commit's client event id."
        ),
        sections=(_COMMIT,),
        rows=(
            RowRef("commit", "quiet"),
            RowRef("commit", "retain"),
            RowRef("commit", "defer"),
            RowRef("commit", "route_asr", "pending"),
            RowRef("commit", "route_vlm", "pending"),
        ),
        invariants=("I3",),
        tests=(
            "tests/conformance/test_b12_b16_input_and_segments.py::test_b15_every_commit_gets_exactly_one_terminal_ack_with_its_event_id",
        ),
    ),
    Behaviour(
        id="B16",
        title="Commits queued behind an active response stay separate segments",
        summary=(
            "Deferred commits become one response with one ASR request per commit; each "
            "transcript goes to its own item, and the VLM gets them joined in commit order."
        ),
        sections=(_COMMIT, _PIPELINE),
        rows=(
            RowRef("commit", "defer"),
            RowRef("commit", "route_asr", "deferred"),
            RowRef("item", "transcribe"),
        ),
        invariants=("I7",),
        tests=(
            "tests/conformance/test_b12_b16_input_and_segments.py::test_b16_commits_queued_behind_an_active_response_stay_separate_segments",
        ),
    ),
    Behaviour(
        id="B17",
        title="A stage failure fails only the owning response",
        summary=(
            "A failed stage request fails its response (error, failed transcriptions, one "
            "`response.done` with status failed); the session goes on and deferred commits "
            "start next."
        ),
        sections=(_FAILURE,),
        rows=(
            RowRef("response", "fail"),
            RowRef("commit", "fail"),
            RowRef("item", "fail_transcription"),
        ),
        invariants=("I2", "I4"),
        tests=(
            "tests/conformance/test_b17_b19_failures_and_playback.py::test_b17_a_stage_failure_fails_only_the_owning_response_and_the_session_goes_on",
            "tests/conformance/test_b17_b19_failures_and_playback.py::test_b17_asr_finished_then_the_next_step_failed_cleans_up_and_fails_the_rest",
            "tests/conformance/test_b17_b19_failures_and_playback.py::test_b17_failure_starts_the_deferred_commit_next",
        ),
    ),
    Behaviour(
        id="B18",
        title="Submission compensation: abort what may have been accepted, evict a dead engine",
        summary=(
            "A submission that failed after the engine may have accepted it is aborted once; a "
            "dead engine is evicted at once, its request fails exactly once, and the backend "
            "leaves service."
        ),
        sections=(_FAILURE,),
        rows=(RowRef("response", "fail"),),
        invariants=("I2", "I4"),
        tests=(
            "tests/conformance/test_b17_b19_failures_and_playback.py::test_b18_submission_failure_after_possible_acceptance_aborts_once_keeping_the_error",
            "tests/conformance/test_b17_b19_failures_and_playback.py::test_b18_cancellation_during_submission_then_the_late_failure_is_fenced",
            "tests/conformance/test_b17_b19_failures_and_playback.py::test_b18_a_dead_replica_is_evicted_at_once_and_the_request_failed_exactly_once",
            "tests/transport/test_end_to_end.py::test_b18_a_dead_engine_fails_readiness_and_new_sessions_get_resource_exhausted",
            "tests/backends/test_gpu_placement.py::test_b18_an_evicted_gpu_engine_takes_the_backend_out_of_service",
        ),
    ),
    Behaviour(
        id="B19",
        title="Playback truth: the played cursor and the played prefix",
        summary=(
            "`playback.ack` moves a monotonic cursor capped at what was generated; a cancelled "
            "reply keeps only its played prefix in history; a late ack touches only its own "
            "response."
        ),
        sections=(_PLAYBACK, _CANCEL),
        rows=(
            RowRef("playback", "start"),
            RowRef("playback", "finish"),
            RowRef("playback", "drain"),
            RowRef("playback", "clear"),
            RowRef("playback", "ack"),
            RowRef("item", "truncate"),
        ),
        invariants=("I8",),
        tests=(
            "tests/conformance/test_b17_b19_failures_and_playback.py::test_b19_playback_ack_moves_a_monotonic_cursor_capped_at_generated",
            "tests/conformance/test_b17_b19_failures_and_playback.py::test_b19_a_cancelled_reply_keeps_only_its_played_prefix_in_history",
            "tests/conformance/test_b17_b19_failures_and_playback.py::test_b19_a_late_ack_for_an_older_response_affects_only_that_response",
        ),
    ),
    Behaviour(
        id="B20",
        title="Push-to-talk holds (client)",
        summary=(
            "A muted or empty hold sends no commit and leaves the camera running; an answer "
            "finishes exactly the hold whose event id it carries, leaving other holds and "
            "earlier replies untouched."
        ),
        sections=(_HOLDS,),
        rows=(
            RowRef("client_hold", "press"),
            RowRef("client_hold", "server_commit"),
            RowRef("client_hold", "mute", "pressed"),
            RowRef("client_hold", "unmute", "muted"),
            RowRef("client_hold", "upload"),
            RowRef("client_hold", "release"),
            RowRef("client_hold", "committed"),
            RowRef("client_hold", "committed_no_response"),
            RowRef("client_hold", "rejected"),
            RowRef("client_hold", "answer"),
            RowRef("client_hold", "settle"),
            RowRef("client_camera", "audio_stops"),
            RowRef("client_camera", "frame", "standalone"),
        ),
        invariants=("H1", "H2", "H3", "H4", "N1"),
        tests=(
            "tests/conformance/test_b20_ptt_holds.py::test_b20_muted_hold_sends_no_commit_and_camera_keeps_running",
            "tests/conformance/test_b20_ptt_holds.py::test_b20_hold_muted_before_any_upload_sends_no_commit",
            "tests/conformance/test_b20_ptt_holds.py::test_b20_empty_hold_sends_no_commit_and_never_arms_the_watchdog",
            "tests/conformance/test_b20_ptt_holds.py::test_b20_rejected_commit_while_another_is_pending_releases_only_its_own_hold",
            "tests/conformance/test_b20_ptt_holds.py::test_b20_quiet_hold_after_done_before_drain_keeps_reply_and_settles_its_watchdog",
            "tests/conformance/test_b20_ptt_holds.py::test_b20_no_response_ack_with_two_pending_commits_finishes_exactly_its_hold",
            "tests/conformance/test_b20_ptt_holds.py::test_b20_spoken_ack_before_quiet_ack_of_two_pending_commits",
        ),
    ),
    Behaviour(
        id="B21",
        title="Client playback: interrupts clear at once, late audio is fenced",
        summary=(
            "Speech start, `output_audio_buffer.cleared` or a cancelled `response.done` clear "
            "queued audio at once, also after generation completed; late audio of an ended "
            "response is dropped; the played cursor is acknowledged."
        ),
        sections=(_CLIENT_PLAYBACK,),
        rows=(
            RowRef("client_playback", "audio"),
            RowRef("client_playback", "finish", "queued"),
            RowRef("client_playback", "drained", "draining"),
            RowRef("client_playback", "clear", "queued"),
            RowRef("client_playback", "stopped", "cleared"),
            RowRef("client_hold", "interrupt"),
        ),
        invariants=("C1", "C2", "C3"),
        tests=(
            "tests/conformance/test_b21_client_playback.py::test_b21_vad_speech_start_during_generation_clears_at_once",
            "tests/conformance/test_b21_client_playback.py::test_b21_vad_speech_start_after_generation_completed_with_audio_queued_clears_it",
            "tests/conformance/test_b21_client_playback.py::test_b21_speech_start_does_not_clear_a_drained_reply",
            "tests/conformance/test_b21_client_playback.py::test_b21_late_audio_of_an_older_response_after_interrupt_is_dropped",
            "tests/conformance/test_b21_client_playback.py::test_b21_cancelled_done_and_cleared_event_clear_playback",
            "tests/conformance/test_b21_client_playback.py::test_b21_failed_done_plays_out_what_arrived",
            "tests/conformance/test_b21_client_playback.py::test_b21_played_cursor_is_monotonic_and_reports_after_the_end_are_ignored",
        ),
    ),
    Behaviour(
        id="B22",
        title="Client modes and camera cadence",
        summary=(
            "While audio is uploaded, frames ride with the next audio append; otherwise the "
            "camera keeps its 1 fps cadence alone. Both modes' session payloads pass the "
            "public validator."
        ),
        sections=(_MODES,),
        rows=(
            RowRef("client_camera", "enable"),
            RowRef("client_camera", "audio_starts"),
            RowRef("client_camera", "audio_stops"),
            RowRef("client_camera", "frame", "standalone"),
            RowRef("client_camera", "frame", "riding"),
        ),
        invariants=("K1", "K2"),
        tests=(
            "tests/conformance/test_b22_client_modes.py::test_b22_vad_mode_frames_ride_with_speech_appends",
            "tests/conformance/test_b22_client_modes.py::test_b22_vad_mode_muted_frames_go_alone",
            "tests/conformance/test_b22_client_modes.py::test_b22_ptt_mode_camera_keeps_its_cadence_outside_recording",
            "tests/conformance/test_b22_client_modes.py::test_b22_ptt_mode_frames_ride_while_recording",
            "tests/conformance/test_b22_client_modes.py::test_b22_mode_session_payload_passes_the_public_validator",
        ),
    ),
    Behaviour(
        id="B23",
        title="The client's turn watchdog",
        summary=(
            "The 120 s watchdog is armed only while a turn awaits a reply, restarted by each "
            "submission, and disarmed by every terminal path; expiry ends the call."
        ),
        sections=(_WATCHDOG,),
        rows=(
            RowRef("client_watchdog", "arm"),
            RowRef("client_watchdog", "disarm"),
            RowRef("client_watchdog", "expire"),
            RowRef("client_hold", "release", "recording"),
            RowRef("client_hold", "committed_no_response"),
            RowRef("client_hold", "rejected"),
            RowRef("client_hold", "settle"),
            RowRef("client_hold", "interrupt"),
        ),
        invariants=("W1", "W2"),
        tests=(
            "tests/conformance/test_b23_watchdog.py::test_b23_watchdog_is_120_s_and_armed_by_a_submitted_hold",
            "tests/conformance/test_b23_watchdog.py::test_b23_disarmed_by_response_done",
            "tests/conformance/test_b23_watchdog.py::test_b23_disarmed_by_a_cancelled_or_failed_done",
            "tests/conformance/test_b23_watchdog.py::test_b23_disarmed_by_no_response",
            "tests/conformance/test_b23_watchdog.py::test_b23_disarmed_by_rejection",
            "tests/conformance/test_b23_watchdog.py::test_b23_disarmed_by_interrupt_stop_button",
            "tests/conformance/test_b23_watchdog.py::test_b23_disarmed_by_vad_interrupt",
            "tests/conformance/test_b23_watchdog.py::test_b23_not_armed_by_empty_or_muted_holds_nor_by_vad_quiet_commits",
            "tests/conformance/test_b23_watchdog.py::test_b23_stays_armed_while_another_hold_awaits",
            "tests/conformance/test_b23_watchdog.py::test_b23_new_submission_restarts_and_expiry_ends_the_call",
        ),
    ),
    Behaviour(
        id="B24",
        title="Sessions are isolated from each other",
        summary=(
            "One session's bad input, rejected events and backend failures never change "
            "another session's state or output; an unexpected server error ends only its "
            "own session, with `error server_error` and close 1011."
        ),
        sections=(_LIMITS,),
        rows=(RowRef("response", "fail"),),
        invariants=(),
        tests=(
            "tests/conformance/test_b24_b25_isolation_and_limits.py::test_b24_one_sessions_bad_input_and_backend_failure_do_not_affect_another",
            "tests/transport/test_end_to_end.py::test_b24_garbage_and_a_failing_backend_do_not_disturb_other_sessions",
            "tests/transport/test_end_to_end.py::test_b24_three_inputs_that_crashed_a_session_get_answers_and_the_session_lives_on",
            "tests/runtime/test_crash_boundary.py::test_b24_an_exception_in_receive_ends_only_its_session_with_server_error_and_1011",
            "tests/runtime/test_crash_boundary.py::test_b24_an_exception_in_the_timer_is_one_crash_not_a_loop",
            "tests/runtime/test_crash_boundary.py::test_b24_an_exception_handling_a_stage_result_closes_with_1011",
            "tests/runtime/test_crash_boundary.py::test_b24_a_camera_only_append_at_24_khz_is_valid",
            "tests/runtime/test_crash_boundary.py::test_b24_an_idle_timeout_of_1e306_is_refused_and_the_session_lives_on",
            "tests/runtime/test_crash_boundary.py::test_b24_a_server_event_that_cannot_be_sent_is_a_crash_not_a_hang",
        ),
    ),
    Behaviour(
        id="B25",
        title="Limits are enforced with their error codes",
        summary=(
            "Frame count, size and kind, input formats and rates, the idle timeout and "
            "max_sessions are checked before anything changes and answered with their own codes; "
            "a connection over its event or byte budget has its frames refused undecoded "
            "(`rate_limit_exceeded`, with their ids) and, if it goes on, is closed 1008, "
            "while its neighbours are served as before."
        ),
        sections=(_LIMITS, _APPEND, _SESSION),
        rows=(),
        invariants=("I5", "I9", "COMMIT-1"),
        tests=(
            "tests/conformance/test_b24_b25_isolation_and_limits.py::test_b25_frame_count_size_and_kind_are_enforced",
            "tests/conformance/test_b24_b25_isolation_and_limits.py::test_b25_formats_and_sample_rates_are_enforced",
            "tests/conformance/test_b24_b25_isolation_and_limits.py::test_b25_every_input_format_and_rate_is_converted_to_16k",
            "tests/conformance/test_b24_b25_isolation_and_limits.py::test_b25_idle_timeout_closes_the_session",
            "tests/conformance/test_b24_b25_isolation_and_limits.py::test_b25_max_sessions_is_enforced_with_resource_exhausted",
            "tests/conformance/test_b24_b25_isolation_and_limits.py::test_b25_a_camera_only_append_is_valid_at_every_input_rate",
            "tests/conformance/test_b24_b25_isolation_and_limits.py::test_b25_the_operators_idle_timeout_is_a_ceiling_the_client_can_only_lower",
            "tests/conformance/test_b24_b25_isolation_and_limits.py::test_b25_a_client_idle_timeout_applies_when_the_operator_has_none",
            "tests/conformance/test_b24_b25_isolation_and_limits.py::test_b25_a_non_finite_negative_or_huge_idle_timeout_is_refused",
            "tests/conformance/test_b24_b25_isolation_and_limits.py::test_b25_free_form_session_objects_nest_at_most_max_nesting_deep",
            "tests/conformance/test_b24_b25_isolation_and_limits.py::test_b25_audio_per_append_is_bounded_after_decoding",
            "tests/conformance/test_b24_b25_isolation_and_limits.py::test_b25_the_default_audio_per_append_bounds_a_14_mb_append",
            "tests/conformance/test_b24_b25_isolation_and_limits.py::test_b25_beyond_max_items_the_oldest_completed_items_are_deleted",
            "tests/conformance/test_b24_b25_isolation_and_limits.py::test_b25_items_still_in_progress_are_never_truncated",
            "tests/conformance/test_b24_b25_isolation_and_limits.py::test_b25_an_item_with_more_than_max_content_parts_is_refused",
            "tests/conformance/test_b24_b25_isolation_and_limits.py::test_b25_beyond_max_history_bytes_the_oldest_completed_items_are_deleted",
            "tests/conformance/test_b24_b25_isolation_and_limits.py::test_b25_beyond_max_responses_the_oldest_finished_are_forgotten",
            "tests/conformance/test_b24_b25_isolation_and_limits.py::test_b25_a_response_whose_audio_may_still_play_is_remembered",
            "tests/runtime/test_timers.py::test_b25_a_hosted_session_uses_the_process_timers_for_its_idle_timeout",
            "tests/transport/test_end_to_end.py::test_b25_an_overloaded_server_sheds_new_sessions_with_1013_and_serves_the_admitted",
            "tests/transport/test_rate_limits.py::test_b25_frames_over_the_budget_are_refused_with_their_ids_then_closed_1008",
            "tests/transport/test_rate_limits.py::test_b25_a_frame_over_the_byte_budget_is_refused_and_smaller_frames_still_pass",
            "tests/transport/test_rate_limits.py::test_b25_a_neighbouring_session_keeps_working_while_one_is_refused_and_closed",
            "tests/transport/test_rate_limits.py::test_b25_a_normal_duplex_client_at_its_real_rate_never_meets_the_default_limits",
            "tests/transport/test_rate_limits.py::test_b25_the_channel_yields_to_the_loop_before_every_frame",
            "tests/transport/test_rate_limits.py::test_b25_a_refused_frame_names_its_event_id_from_a_bounded_search",
            "tests/transport/test_rate_limits.py::test_b25_a_flood_beside_clean_sessions_is_refused_and_closed_and_they_see_no_error",
        ),
    ),
    Behaviour(
        id="B26",
        title="Exposure: credentials and origins are checked before the upgrade and never logged",
        summary=(
            "A missing or wrong API key is answered HTTP 401 `unauthorized`, a refused browser "
            "origin HTTP 403 `origin_not_allowed` (by default only no Origin, the server's own "
            "and loopback origins pass), before any websocket upgrade or session; keys never "
            "appear in a log; `protect_probes` puts /readyz and /metrics behind the key."
        ),
        sections=(_EXPOSURE, _LIMITS),
        rows=(),
        invariants=("I10",),
        tests=(
            "tests/conformance/test_b26_exposure.py::test_b26_a_missing_or_wrong_key_is_401_unauthorized_and_any_of_the_three_carriers_works",
            "tests/conformance/test_b26_exposure.py::test_b26_the_refusal_body_is_the_error_object_of_the_wire",
            "tests/conformance/test_b26_exposure.py::test_b26_the_default_policy_allows_no_origin_the_own_origin_and_loopback",
            "tests/conformance/test_b26_exposure.py::test_b26_the_default_policy_refuses_every_other_origin_with_403",
            "tests/conformance/test_b26_exposure.py::test_b26_a_star_allows_any_origin_and_a_list_exactly_its_own",
            "tests/conformance/test_b26_exposure.py::test_b26_protected_probes_need_the_bearer_key",
            "tests/conformance/test_b26_exposure.py::test_b26_a_logged_line_never_holds_the_key",
            "tests/transport/test_exposure.py::test_b26_a_wrong_or_missing_key_gets_http_401_before_any_upgrade",
            "tests/transport/test_exposure.py::test_b26_the_right_key_by_header_subprotocol_or_query_is_upgraded",
            "tests/transport/test_exposure.py::test_b26_a_foreign_origin_gets_403_under_the_default_policy",
            "tests/transport/test_exposure.py::test_b26_loopback_and_own_origins_are_accepted_by_default",
            "tests/transport/test_exposure.py::test_b26_the_own_origin_is_the_host_header_whatever_the_name",
            "tests/transport/test_exposure.py::test_b26_a_star_allows_any_origin",
            "tests/transport/test_exposure.py::test_b26_a_configured_list_allows_exactly_its_origins",
            "tests/transport/test_exposure.py::test_b26_protected_probes_answer_401_without_the_key_and_200_with_it",
            "tests/transport/test_exposure.py::test_b26_probes_are_open_by_default_even_with_a_key",
            "tests/transport/test_exposure.py::test_b26_the_python_client_raises_handshake_refused_naming_the_code",
            "tests/transport/test_exposure.py::test_b26_without_the_denial_extension_the_refusal_is_a_close_before_the_accept",
            "tests/transport/test_exposure.py::test_b26_joyduplex_client_names_a_refused_key_and_what_to_do",
            "tests/transport/test_exposure.py::test_b26_the_bench_counts_refusals_by_code_and_says_what_to_do",
            "tests/transport/test_exposure.py::test_b26_protect_probes_needs_an_api_key_and_origins_must_be_origins",
            "tests/transport/test_exposure_served.py::test_b26_the_log_of_a_served_process_never_holds_the_key",
            "tests/web/test_browser_exposure.py::test_b26_the_web_ui_names_a_refused_connection_and_connects_with_the_fragment_key",
        ),
    ),
    Behaviour(
        id="B27",
        title="A dropped connection resumes with nothing lost",
        summary=(
            "A resumable session (the duplex dialect: `/v1/duplex`, `?duplex=1` or a duplex "
            "deployment; or `/v1/realtime?resumable=1`) whose "
            "connection fails is detached, not ended: its reply goes on into a bounded "
            "journal of numbered events, and `session.resume` with the current token on a "
            "new connection gets `session.resumed`, every event after the client's cursor "
            "once and in order, then live events; a wrong or used token, an unknown session "
            "and an impossible replay are typed answers; the grace period frees the slot. "
            "With several worker processes, a resume that reaches a worker which does not "
            "hold the session is relayed to the one that does (D39)."
        ),
        sections=(_RESUME, _D27, _D28, _D39, _SESSION),
        rows=(
            RowRef("attachment", "detach"),
            RowRef("attachment", "resume"),
            RowRef("attachment", "replace"),
            RowRef("attachment", "expire"),
        ),
        invariants=("ATTACH-1", "ATTACH-2", "ATTACH-3"),
        tests=(
            "tests/conformance/test_b27_resume.py::test_b27_a_replay_after_k_is_every_journaled_event_above_k_in_order",
            "tests/conformance/test_b27_resume.py::test_b27_an_ack_trims_the_journal_and_a_cursor_behind_it_is_a_gap",
            "tests/conformance/test_b27_resume.py::test_b27_the_byte_and_age_bounds_drop_the_oldest_and_an_early_cursor_overflows",
            "tests/conformance/test_b27_resume.py::test_b27_every_resume_rotates_the_token_and_a_used_token_is_refused",
            "tests/conformance/test_b27_resume.py::test_b27_an_expired_or_closed_session_cannot_be_resumed",
            "tests/runtime/test_resume_runner.py::test_b27_a_detached_session_finishes_its_reply_into_the_journal",
            "tests/runtime/test_resume_runner.py::test_b27_an_event_ack_trims_the_journal",
            "tests/runtime/test_resume_runner.py::test_b27_shutdown_ends_a_detached_session_and_frees_its_slot",
            "tests/runtime/test_resume_runner.py::test_b27_a_resume_of_a_session_whose_worker_exited_is_unknown_session_saying_so",
            "tests/runtime/test_resume_runner.py::test_b27_a_session_of_another_live_worker_is_relayed_to_that_worker",
            "tests/runtime/test_resume_runner.py::test_b27_a_host_id_names_the_server_in_its_ids_and_only_its_own_ids_are_relayed",
            "tests/runtime/test_resume_runner.py::test_b27_a_resume_of_another_hosts_session_is_unknown_session_naming_that_host",
            "tests/transport/test_resume.py::test_b27_a_connection_dropped_mid_reply_resumes_with_the_whole_reply_and_nothing_twice",
            "tests/transport/test_resume.py::test_b27_a_wrong_a_rotated_or_an_unknown_resume_is_refused_with_its_code",
            "tests/transport/test_resume.py::test_b27_a_resume_while_the_old_socket_is_attached_replaces_it",
            "tests/transport/test_resume.py::test_b27_a_resume_from_before_an_overflowed_journal_gets_resync_required",
            "tests/transport/test_resume.py::test_b27_without_a_resume_the_grace_expires_and_the_slot_is_freed",
            "tests/transport/test_resume.py::test_b27_a_ga_client_that_did_not_opt_in_sees_no_resume_fields",
            "tests/transport/test_resume.py::test_b27_a_normal_close_ends_a_resumable_session_at_once",
            "tests/transport/test_duplex_dialect.py::test_b27_duplex_query_makes_a_realtime_session_resumable",
            "tests/transport/test_duplex_dialect.py::test_b27_a_duplex_deployment_makes_every_session_resumable",
            "tests/transport/test_duplex_dialect.py::test_b27_a_resume_on_the_autostart_0_url_resumes_the_session",
            "tests/transport/test_duplex_dialect.py::test_b27_vllm_omni_duplex_client_unchanged_resumes_a_reply_cut_by_a_dropped_socket",
            "tests/transport/test_resume_across_workers.py::test_b27_a_hundred_resumes_against_four_workers_all_resume",
            "tests/transport/test_resume_across_workers.py::test_b27_a_second_resume_through_another_worker_replaces_the_first",
            "tests/transport/test_resume_across_workers.py::test_b27_a_resume_whose_worker_exited_is_unknown_session_saying_so",
            "tests/transport/test_resume_across_workers.py::test_b27_vllm_omni_duplex_client_unchanged_resumes_against_a_served_process",
        ),
    ),
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
            "session does not offer are dropped."
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
)

#: every behaviour id, in catalogue order
BEHAVIOUR_IDS: tuple[str, ...] = tuple(b.id for b in BEHAVIOURS)

_BY_ID: dict[str, Behaviour] = {b.id: b for b in BEHAVIOURS}


def behaviour(behaviour_id: str) -> Behaviour:
    """The catalogue entry of `behaviour_id` ("B11").

    Raises:
        KeyError: no such behaviour.
    """
    return _BY_ID[behaviour_id]


def table_named(name: str) -> Table | None:
    """The machine table called `name`, if there is one."""
    return next((t for t in ALL_TABLES if t.name == name), None)


def rows_of(ref: RowRef) -> tuple[T, ...]:
    """The rows `ref` names, in table order; empty when it names none."""
    table = table_named(ref.machine)
    if table is None:
        return ()
    return tuple(
        row
        for row in table.transitions
        if row.trigger == ref.trigger
        and (ref.source is None or any(s.value == ref.source for s in row.source))
    )


def invariant_text(invariant_id: str) -> str | None:
    """The text of an invariant: a session invariant, else a table's; None if unknown."""
    if invariant_id in SESSION_INVARIANTS:
        return SESSION_INVARIANTS[invariant_id]
    for table in ALL_TABLES:
        if invariant_id in table.invariants:
            return table.invariants[invariant_id]
    return None
