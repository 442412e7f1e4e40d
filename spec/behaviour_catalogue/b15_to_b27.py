"""The behaviour catalogue, B15-B27: each entry as data (see `spec.behaviours`)."""

from __future__ import annotations

from spec.behaviour_catalogue.entry import Behaviour, RowRef
from spec.behaviour_catalogue.sections import (
    _APPEND,
    _CANCEL,
    _CLIENT_PLAYBACK,
    _COMMIT,
    _D27,
    _D28,
    _D39,
    _EXPOSURE,
    _FAILURE,
    _HOLDS,
    _LIMITS,
    _MODES,
    _PIPELINE,
    _PLAYBACK,
    _RESUME,
    _SESSION,
    _WATCHDOG,
)

__all__ = ["BEHAVIOURS"]

BEHAVIOURS: tuple[Behaviour, ...] = (
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
            RowRef("client_reply_gate", "cut"),
            RowRef("client_reply_gate", "started", "muted"),
            RowRef("client_hold", "interrupt"),
        ),
        invariants=("C1", "C2", "C3", "R1", "R2"),
        tests=(
            "tests/conformance/test_b21_client_playback.py::test_b21_vad_speech_start_during_generation_clears_at_once",
            "tests/conformance/test_b21_client_playback.py::test_b21_vad_speech_start_after_generation_completed_with_audio_queued_clears_it",
            "tests/conformance/test_b21_client_playback.py::test_b21_speech_start_does_not_clear_a_drained_reply",
            "tests/conformance/test_b21_client_playback.py::test_b21_late_audio_of_an_older_response_after_interrupt_is_dropped",
            "tests/conformance/test_b21_client_playback.py::test_b21_cancelled_done_and_cleared_event_clear_playback",
            "tests/conformance/test_b21_client_playback.py::test_b21_failed_done_plays_out_what_arrived",
            "tests/conformance/test_b21_client_playback.py::test_b21_played_cursor_is_monotonic_and_reports_after_the_end_are_ignored",
            "tests/core/test_client_reply_gate.py::test_b21_a_barge_in_mutes_the_cut_reply_at_once",
            "tests/core/test_client_reply_gate.py::test_b21_the_next_reply_start_unmutes",
            "tests/core/test_client_reply_gate.py::test_b21_the_cut_reply_late_started_keeps_it_muted",
            "tests/core/test_client_reply_gate.py::test_b21_a_clear_of_every_reply_mutes_each_live_one_until_another_starts",
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
)
