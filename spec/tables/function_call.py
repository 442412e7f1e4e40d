"""Function call: one call the model makes, from its first arguments to its output."""

from __future__ import annotations

import enum

from spec.tables.base import T, Table

__all__ = ["FUNCTION_CALL", "FunctionCallState"]


class FunctionCallState(enum.Enum):
    ARGUMENTS = "arguments"  # its arguments stream (`response.function_call_arguments.delta`)
    CALLED = "called"  # its arguments are final: it waits for the client's output
    ANSWERED = "answered"  # a `function_call_output` with its call id was added
    INCOMPLETE = "incomplete"  # cut during its arguments (cancel, barge-in, failure, bound)


S = FunctionCallState

FUNCTION_CALL = Table(
    name="function_call",
    doc=(
        "A function call of a response (B38): a `function_call` item in the conversation "
        "whose JSON arguments stream, end with `response.function_call_arguments.done`, "
        "and wait for the one `function_call_output` the client answers with (B39). An "
        "interrupt during the arguments ends it `incomplete`: it can never be answered."
    ),
    states=FunctionCallState,
    initial=S.ARGUMENTS,
    terminal=frozenset({S.ANSWERED, S.INCOMPLETE}),
    transitions=(
        T(
            "stream",
            S.ARGUMENTS,
            None,
            effect="emit_arguments_delta",
            behaviours=("B38", "B40"),
        ),
        T("finish", S.ARGUMENTS, S.CALLED, effect="emit_call_done", behaviours=("B38", "B40")),
        # a `function_call` item the client creates itself (history it brings): final at once
        T("import_call", S.ARGUMENTS, S.CALLED, behaviours=("B39",)),
        T("cut", S.ARGUMENTS, S.INCOMPLETE, effect="emit_call_incomplete", behaviours=("B38",)),
        T("answer", S.CALLED, S.ANSWERED, behaviours=("B39",)),
    ),
    invariants={
        "CALL-1": "a call is answered at most once, and only once its arguments are final",
        "CALL-2": "every call a response opened ends (done or incomplete) before its response.done",
    },
)
