"""Size limits on one turn, checked where a turn enters: at enqueue and again on the worker.

The worker checks again because anyone who can write to the broker can skip
`enqueue_turn`. The cheap checks (bytes, counts) run on the raw payload before
it is validated, so a huge payload costs one measurement, not a full parse.
Every refusal is an `InputError` naming the field and the limit it broke.
"""

from __future__ import annotations

import json
from typing import Any

from worker.errors import InputError
from worker.settings import LimitsSettings
from worker.types import TextPart, TurnRequest, parse_turn_request

__all__ = ["check_payload", "check_request", "checked_turn", "request_bytes", "turn_time_s"]

# (payload field, the limit on how many items it may hold)
_COUNTED = (("messages", "max_messages"), ("tools", "max_tools"))


def turn_time_s(request: TurnRequest, turn_deadline_s: float) -> float:
    """How long the turn may take: its own deadline, within the fleet's `turn_deadline_s`."""
    return min(request.deadline_s, turn_deadline_s)


def request_bytes(payload: object) -> int:
    """The size of `payload` as UTF-8 JSON (text and bytes: as they are)."""
    if isinstance(payload, bytes):
        return len(payload)
    text = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)
    # surrogatepass: measure text the parser will then refuse, naming where it is.
    return len(text.encode("utf-8", "surrogatepass"))


def check_payload(payload: object, limits: LimitsSettings) -> None:
    """Refuse a raw payload (a dict, or JSON text) that is too large, before parsing it."""
    if isinstance(payload, dict):
        # Counts first: they cost nothing and name the field.
        for field, limit in _COUNTED:
            items = payload.get(field)
            if isinstance(items, list | tuple):
                _check_count(field, len(items), limit, limits)
    try:
        size = request_bytes(payload)
    except (TypeError, ValueError, RecursionError) as exc:
        raise InputError(f"(root): not a JSON document ({type(exc).__name__})") from None
    if size > limits.max_request_bytes:
        raise InputError(
            f"(root): the request is {size} bytes, over limits.max_request_bytes "
            f"({limits.max_request_bytes})"
        )


def check_request(request: TurnRequest, limits: LimitsSettings) -> None:
    """Refuse a parsed turn over any limit (a `TurnRequest` built in code skips `check_payload`)."""
    check_payload(request.model_dump(mode="json"), limits)
    _check_content(request, limits)


def checked_turn(
    payload: TurnRequest | object, limits: LimitsSettings, *, queued: bool = False
) -> TurnRequest:
    """The turn in `payload` (a TurnRequest, a dict or JSON text) if valid and within limits.

    `queued`: a turn taken from the queue, which a newer release may have sent: fields this
    release does not know are ignored (`parse_turn_request`), not refused."""
    if isinstance(payload, TurnRequest):
        check_request(payload, limits)
        return payload
    if not isinstance(payload, dict | str | bytes):
        raise InputError(f"(root): a turn request is a JSON object, not {_json_type(payload)}")
    check_payload(payload, limits)
    data: dict[str, Any] | str | bytes = payload
    request = parse_turn_request(data, ignore_unknown=queued)
    _check_content(request, limits)
    return request


def _check_content(request: TurnRequest, limits: LimitsSettings) -> None:
    _check_count("messages", len(request.messages), "max_messages", limits)
    _check_count("tools", len(request.tools), "max_tools", limits)
    attachments = 0
    for index, message in enumerate(request.messages):
        chars = len(message.content) if isinstance(message.content, str) else len(message.text)
        if chars > limits.max_message_chars:
            raise InputError(
                f"messages.{index}.content: {chars} characters, over "
                f"limits.max_message_chars ({limits.max_message_chars})"
            )
        for part_index, part in enumerate(message.parts):
            size = None if isinstance(part, TextPart) else part.size_bytes
            if size is not None and size > limits.max_attachment_bytes:
                raise InputError(
                    f"messages.{index}.content.{part_index}.data: {size} bytes, over "
                    f"limits.max_attachment_bytes ({limits.max_attachment_bytes})"
                )
        attachments += len(message.attachments)
    _check_count("attachments", attachments, "max_attachments", limits)


def _check_count(field: str, count: int, limit: str, limits: LimitsSettings) -> None:
    allowed: int = getattr(limits, limit)
    if count > allowed:
        raise InputError(f"{field}: {count} items, over limits.{limit} ({allowed})")


def _json_type(value: object) -> str:
    names = {list: "an array", int: "a number", float: "a number", bool: "a boolean"}
    return "null" if value is None else names.get(type(value), type(value).__name__)
