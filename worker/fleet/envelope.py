"""A turn's broker message as the fair queue keeps it, in either broker's format.

A turn waits in the fair queue as the message its producer's broker channel would have
sent: kombu's Redis transport's (JSON: `body`, `headers`, `properties` with
`delivery_info` and `delivery_tag`) or the RabbitMQ outbox's envelope (JSON: `body` in
base64, the AMQP `properties`, `exchange`, `routing_key`). Producers and workers disagree
on the broker for a while when a fleet switches broker with turns queued, or when a
relevo 0.1.0 producer (which ignores `[broker] url`) still runs: so each reader takes
either format (`amqp_message`, `redis_message`), and an entry that is neither is
`Undecodable`, naming why and, when the entry says, its turn (`identify`).
"""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from typing import Any

import amqp
import structlog
from kombu.utils import json as kombu_json
from pydantic import TypeAdapter, ValidationError

from worker.fleet.fairqueue import TENANT_HEADER
from worker.types.base import TenantId, is_turn_id

__all__ = [
    "UNREADABLE_TYPE",
    "Undecodable",
    "amqp_message",
    "compact",
    "envelope",
    "identify",
    "redis_message",
]

log = structlog.get_logger("relevo.broker")
# The content type of a delivery that is no message: no worker accepts it, so Celery logs
# it and acknowledges it.
UNREADABLE_TYPE = "application/x-relevo-unreadable"
_TENANT: TypeAdapter[str] = TypeAdapter(TenantId)
# The AMQP basic properties a Redis transport message carries among its `properties`.
_AMQP_PROPERTIES = ("correlation_id", "reply_to", "delivery_mode", "priority", "expiration")


class Undecodable(ValueError):
    """An entry that is not a broker message in either format; `why` says what is wrong."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


def compact(data: Any) -> str:
    """JSON without spaces or escapes: non-ASCII text stays UTF-8, not a `\\u` six bytes.

    Text UTF-8 cannot carry (a lone surrogate, which only a hand-made message holds: intake
    refuses it) keeps its escapes, so the message still reaches the worker that refuses it.
    """
    text: str = kombu_json.dumps(data, ensure_ascii=False, separators=(",", ":"))  # type: ignore[no-untyped-call]
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        escaped: str = kombu_json.dumps(data, separators=(",", ":"))  # type: ignore[no-untyped-call]
        return escaped
    return text


def envelope(msg: Any, exchange: str, routing_key: str) -> str:
    """The AMQP message as the outbox keeps it, to be published as it was."""
    body = msg.body
    if isinstance(body, str):
        body = body.encode(msg.properties.get("content_encoding") or "utf-8")
    return compact(
        {
            "body": base64.b64encode(body).decode(),
            "properties": msg.properties,
            "exchange": exchange,
            "routing_key": routing_key,
        }
    )


def _parsed(raw: bytes | str) -> dict[str, Any]:
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise Undecodable(f"not JSON ({type(exc).__name__})") from None
    if not isinstance(data, dict) or not isinstance(data.get("properties"), dict):
        raise Undecodable("not a broker message (no properties)")
    return data


def _body(data: dict[str, Any], base64_encoded: bool) -> bytes:
    body = data.get("body")
    if not isinstance(body, str):
        raise Undecodable("not a broker message (no body)")
    if not base64_encoded:
        return body.encode()
    try:
        return base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError):
        raise Undecodable("its body is not base64") from None


def amqp_message(raw: bytes | str, queue: str) -> tuple[amqp.Message, str, str]:
    """The AMQP message of an outbox entry, and its exchange and routing key; a Redis
    transport message goes to `queue` (the fleet's exchange and queue share its name)."""
    data = _parsed(raw)
    props = data["properties"]
    if "delivery_info" not in props:  # the outbox's own envelope
        exchange, routing_key = data.get("exchange"), data.get("routing_key")
        if not isinstance(exchange, str) or not isinstance(routing_key, str):
            raise Undecodable("not a broker message (no exchange or routing key)")
        try:
            return amqp.Message(_body(data, True), **props), exchange, routing_key
        except TypeError:
            raise Undecodable("its properties are not AMQP properties") from None
    headers = data.get("headers")
    properties: dict[str, Any] = {
        "content_type": data.get("content-type"),
        "content_encoding": data.get("content-encoding"),
        "application_headers": headers if isinstance(headers, dict) else {},
    }
    properties.update((name, props[name]) for name in _AMQP_PROPERTIES if name in props)
    body = _body(data, props.get("body_encoding") == "base64")
    return amqp.Message(body, **properties), queue, queue


def redis_message(payload: Any) -> dict[str, Any]:
    """A payload as kombu's Redis transport reads it: an outbox envelope is turned into
    one (a fresh delivery tag), one of its own is left as it is, and anything else becomes
    a message of `UNREADABLE_TYPE`, which Celery refuses (logged, acknowledged) instead
    of failing its consumer."""
    props = payload.get("properties") if isinstance(payload, dict) else None
    if not isinstance(props, dict):
        return _unreadable(payload)
    if "delivery_info" in props:
        return payload if "delivery_tag" in props else _unreadable(payload)
    if not isinstance(payload.get("body"), str) or "exchange" not in payload:
        return _unreadable(payload)
    properties = {name: props[name] for name in _AMQP_PROPERTIES if name in props}
    properties.setdefault("priority", 0)
    properties["body_encoding"] = "base64"
    properties["delivery_tag"] = str(uuid.uuid4())
    properties["delivery_info"] = {
        "exchange": payload["exchange"],
        "routing_key": payload.get("routing_key"),
    }
    return {
        "body": payload.get("body"),
        "content-type": props.get("content_type"),
        "content-encoding": props.get("content_encoding"),
        "headers": props.get("application_headers") or {},
        "properties": properties,
    }


def _unreadable(payload: Any) -> dict[str, Any]:
    log.error("broker.message_unreadable", detail="a delivery that is no broker message")
    return {
        "body": base64.b64encode(compact(payload).encode()).decode(),
        "content-type": UNREADABLE_TYPE,
        "content-encoding": "binary",
        "headers": {},
        "properties": {
            "delivery_tag": str(uuid.uuid4()),
            "delivery_info": {"exchange": "", "routing_key": ""},
            "body_encoding": "base64",
            "priority": 0,
        },
    }


def identify(raw: bytes | str) -> tuple[str | None, str | None]:
    """The (turn id, tenant) an entry names in its headers, each None unless it is one."""
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None, None
    if not isinstance(data, dict):
        return None, None
    props = data.get("properties")
    headers = data.get("headers")
    if isinstance(props, dict) and isinstance(props.get("application_headers"), dict):
        headers = props["application_headers"]
    if not isinstance(headers, dict):
        return None, None
    turn_id = headers.get("id")
    return (turn_id if is_turn_id(turn_id) else None), _valid(_TENANT, headers.get(TENANT_HEADER))


def _valid(adapter: TypeAdapter[str], value: object) -> str | None:
    try:
        return adapter.validate_python(value)
    except ValidationError:
        return None
