"""Can the backup do the turn: tool capability and context trimming."""

from __future__ import annotations

from typing import Any

import pytest

from worker.settings import ModelSettings, Serving
from worker.turn.capability import Fit, Unfit, fit_turn, trim_history
from worker.turn.tokens import estimate_tokens
from worker.types import Message, Tool, ToolCall, TurnRequest

SEND = Tool(name="send_invoice", side_effects=True)
LOOKUP = Tool(name="lookup_order")


def model(**changes: Any) -> ModelSettings:
    fields: dict[str, Any] = {
        "vendor": "v",
        "serve": (Serving(provider="p", model_id="m"),),
        "context_window": 100_000,
    }
    fields.update(changes)
    return ModelSettings(**fields)


def request(*messages: Message, tools: tuple[Tool, ...] = (), max_tokens: int = 100) -> TurnRequest:
    return TurnRequest(tenant_id="t", messages=messages, tools=tools, max_tokens=max_tokens)


def user(text: str) -> Message:
    return Message(role="user", content=text)


def assistant(text: str = "", *calls: ToolCall) -> Message:
    return Message(role="assistant", content=text, tool_calls=calls)


def result(call_id: str, text: str) -> Message:
    return Message(role="tool", tool_call_id=call_id, content=text)


SYSTEM = Message(role="system", content="You are the support agent of Example Ltd.")


def test_a_full_tool_model_gets_every_tool() -> None:
    fit = fit_turn(request(user("hi"), tools=(SEND, LOOKUP)), model())
    assert isinstance(fit, Fit)
    assert fit.tools == (SEND, LOOKUP)
    assert not fit.read_only


def test_a_model_without_the_turns_tools_is_incapable() -> None:
    fit = fit_turn(request(user("hi"), tools=(SEND,)), model(tools="none"))
    assert isinstance(fit, Unfit)
    assert fit.reason == "incapable"
    assert "send_invoice" in fit.detail


def test_read_only_model_may_run_a_turn_with_only_read_only_tools() -> None:
    fit = fit_turn(request(user("hi"), tools=(LOOKUP,)), model(tools="read_only"))
    assert isinstance(fit, Fit)
    assert fit.tools == (LOOKUP,)
    assert not fit.read_only


def test_read_only_degradation_drops_only_the_side_effecting_tools() -> None:
    fit = fit_turn(
        request(user("hi"), tools=(SEND, LOOKUP)),
        model(tools="read_only", degrade_to_read_only=True),
    )
    assert isinstance(fit, Fit)
    assert fit.tools == (LOOKUP,)
    assert fit.read_only
    assert fit.dropped_tools == ("send_invoice",)


def test_a_turn_without_tools_fits_any_model() -> None:
    fit = fit_turn(request(user("hi")), model(tools="none"))
    assert isinstance(fit, Fit)
    assert fit.tools == ()


def conversation(exchanges: int) -> tuple[Message, ...]:
    messages: list[Message] = [SYSTEM]
    for i in range(exchanges):
        call = ToolCall(id=f"c{i}", name="lookup_order", arguments={"order": i})
        messages += [
            user(f"question {i} " + "x" * 400),
            assistant("", call),
            result(f"c{i}", "y" * 400),
            assistant(f"answer {i} " + "z" * 400),
        ]
    messages.append(user("the latest question"))
    return tuple(messages)


def test_history_that_fits_is_untouched() -> None:
    messages = conversation(3)
    assert trim_history(messages, 10_000) == messages


def test_trimming_keeps_system_prompt_and_latest_user_message() -> None:
    messages = conversation(6)
    room = estimate_tokens(messages) // 2
    kept = trim_history(messages, room)
    assert kept is not None
    assert estimate_tokens(kept) <= room
    assert kept[0] == SYSTEM
    assert kept[-1] == messages[-1]
    assert len(kept) < len(messages)
    assert kept[1].role == "user"
    # What is kept is the most recent part of the history, in order.
    assert kept[1:] == messages[len(messages) - len(kept) + 1 :]


def test_trimming_never_separates_a_tool_call_from_its_result() -> None:
    messages = conversation(8)
    for room in range(50, estimate_tokens(messages), 37):
        kept = trim_history(messages, room)
        if kept is None:
            continue
        calls = {c.id for m in kept for c in m.tool_calls}
        answered = {m.tool_call_id for m in kept if m.role == "tool"}
        assert calls == answered


def test_trimming_that_cannot_fit_gives_none() -> None:
    assert trim_history(conversation(2), 5) is None


def test_small_window_gets_a_trimmed_history_and_reports_it() -> None:
    messages = conversation(6)
    small = model(context_window=estimate_tokens(messages) // 2 + 100)
    fit = fit_turn(request(*messages), small)
    assert isinstance(fit, Fit)
    assert fit.trimmed_messages > 0
    assert len(fit.messages) == len(messages) - fit.trimmed_messages
    assert fit.input_tokens + 100 <= small.context_window


def test_window_too_small_even_trimmed_is_skipped() -> None:
    fit = fit_turn(request(SYSTEM, user("x" * 4000)), model(context_window=200))
    assert isinstance(fit, Unfit)
    assert fit.reason == "context_too_small"


def test_models_no_larger_than_a_window_already_exceeded_are_skipped() -> None:
    fit = fit_turn(request(user("hi")), model(context_window=8000), min_window=8001)
    assert isinstance(fit, Unfit)
    assert fit.reason == "context_too_small"


def test_the_tool_results_of_the_current_exchange_are_kept() -> None:
    call = ToolCall(id="now", name="lookup_order")
    messages = (*conversation(4), assistant("", call), result("now", "found it"))
    kept = trim_history(messages, estimate_tokens(messages) // 2)
    assert kept is not None
    assert kept[-2:] == messages[-2:]
    assert kept[-3] == messages[-3]


@pytest.mark.parametrize("room", [10, 100, 1000])
def test_estimate_grows_with_content(room: int) -> None:
    assert estimate_tokens([user("a" * room)]) > estimate_tokens([user("a")])
