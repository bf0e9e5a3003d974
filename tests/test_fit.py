"""Can the backup do the turn: tool capability, context trimming, what its prompt counts."""

from __future__ import annotations

import base64
import io
import math
from decimal import Decimal
from typing import Any

import pytest
from PIL import Image
from pypdf import PdfWriter

from worker.settings import ModelSettings, Serving
from worker.turn.capability import Fit, Unfit, fit_turn, trim_history
from worker.turn.media import TOKENS_PER_ATTACHMENT, media_rule
from worker.turn.tokens import estimate_tokens, text_tokens
from worker.types import DocumentPart, ImagePart, Message, TextPart, Tool, ToolCall, TurnRequest

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


# --- Images and PDFs: counted as the model's vendor bills them --------------------------


def png(width: int, height: int) -> ImagePart:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height)).save(buffer, "PNG")
    return ImagePart(media_type="image/png", data=base64.b64encode(buffer.getvalue()).decode())


def input_tokens(turn: TurnRequest, settings: ModelSettings) -> int:
    fit = fit_turn(turn, settings)
    assert isinstance(fit, Fit)
    return fit.input_tokens


@pytest.mark.parametrize(
    ("vendor", "multiplier", "image"),
    [
        # OpenAI's patches (1024 > 765 in tiles); Anthropic's w x h / 750; Gemini 3's 1,120.
        ("openai", Decimal(1), 1024),
        ("openai", None, math.ceil(1024 * Decimal("33.34"))),  # as gpt-4o-mini bills
        ("anthropic", None, math.ceil(1024 * 1024 / 750)),
        ("google", None, 1120),
    ],
)
def test_an_image_counts_as_the_models_vendor_bills_it(
    vendor: str, multiplier: Decimal | None, image: int
) -> None:
    settings = model(vendor=vendor, image_token_multiplier=multiplier, inputs=("text", "image"))
    parts = Message(role="user", content=(TextPart(text="What is this?"), png(1024, 1024)))
    text = Message(role="user", content="What is this?")
    added = input_tokens(request(SYSTEM, parts), settings) - input_tokens(
        request(SYSTEM, text), settings
    )
    assert added == image + TOKENS_PER_ATTACHMENT


def test_the_vendor_reaches_trimming() -> None:
    # A 4000 x 3000 photo: 24 Gemini tiles (6,192 tokens), 2,500 on OpenAI's patches.
    photo = Message(role="user", content=(TextPart(text="and this?"), png(4000, 3000)))
    history = (photo, assistant("A bridge."), user("Where is it?"))
    for vendor, trimmed in (("google", 2), ("openai", 0)):
        settings = model(
            vendor=vendor,
            image_token_multiplier=Decimal(1),
            inputs=("text", "image"),
            context_window=4000,
        )
        fit = fit_turn(request(*history, max_tokens=100), settings)
        assert isinstance(fit, Fit)
        assert fit.trimmed_messages == trimmed


def test_an_attachment_of_unknown_size_never_makes_a_turn_unfit() -> None:
    # A PDF by URL: up to 600 pages on Anthropic. Trimming cannot measure it, so it keeps
    # what fits; the reservation holds what the window leaves (a longer prompt is
    # refused, unbilled).
    report = DocumentPart(url="https://example.com/report.pdf", name="report.pdf")
    turn = request(SYSTEM, Message(role="user", content=(TextPart(text="Sum it up"), report)))
    settings = model(vendor="anthropic", inputs=("text", "pdf"), context_window=200_000)
    assert input_tokens(turn, settings) == 200_000
    roomy = model(vendor="anthropic", inputs=("text", "pdf"), context_window=10**8)
    text = input_tokens(request(SYSTEM, user("Sum it up")), roomy)
    largest = media_rule("anthropic").largest_document
    framing = TOKENS_PER_ATTACHMENT + text_tokens("report.pdf")
    assert input_tokens(turn, roomy) == text + largest + framing


def test_a_pdfs_pages_count_per_vendor() -> None:
    writer = PdfWriter()
    for _ in range(4):
        writer.add_blank_page(612, 792)
    buffer = io.BytesIO()
    writer.write(buffer)
    invoice = DocumentPart(data=base64.b64encode(buffer.getvalue()).decode())
    turn = request(Message(role="user", content=(invoice,)))
    empty = request(Message(role="user", content=""))
    for vendor, page in (("google", 560), ("anthropic", 3000 + 5007)):
        settings = model(vendor=vendor, inputs=("text", "pdf"))
        added = input_tokens(turn, settings) - input_tokens(empty, settings)
        assert added == 4 * page + TOKENS_PER_ATTACHMENT
