"""AWS Bedrock Converse and ConverseStream as the simulator speaks them.

The simulator serves the regional endpoint under `/bedrock-runtime/{region}`: a provider
whose `base_url` is `http://SIM/bedrock-runtime/us-east-1` talks to "us-east-1". Every
request must be SigV4-signed for service `bedrock` and that region, with the simulator's
test credentials (`TEST_ACCESS_KEY_ID`, `TEST_SECRET_ACCESS_KEY`, any session token); the
signature itself is checked with botocore, as AWS would check it. The body is checked
as Converse checks it (`worker.simulator.bedrock_request`). Streams are AWS
event-stream messages, framed here (prelude, headers, payload, CRC32s) with zlib.

A request with `outputConfig.textFormat` is answered with JSON its schema accepts (one
it refuses with the fault's `invalid_output`); a forced toolChoice (`tool`, or `any`:
the first tool) is answered with a call to that tool. Converse has no refusal: a
filtered answer stops with `content_filtered`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import struct
import zlib
from collections.abc import Mapping
from typing import Any

from worker.simulator.bedrock_request import check_request, forced_tool, output_schema
from worker.simulator.faults import StreamPayload
from worker.simulator.wire import BadRequest, CannedReply, Inspection, estimate_tokens, fragments

__all__ = [
    "EVENT_STREAM",
    "TEST_ACCESS_KEY_ID",
    "TEST_SECRET_ACCESS_KEY",
    "BedrockDialect",
    "error_type",
    "event",
    "exception_event",
    "frame",
    "signature_problem",
]

EVENT_STREAM = "application/vnd.amazon.eventstream"
TEST_ACCESS_KEY_ID = "AKIAIOSFODNN7RELEVO0"
TEST_SECRET_ACCESS_KEY = "relevo/simulator+not+a+real+secret+key0"  # noqa: S105 - a test value

_CORAL = ":http://internal.amazon.com/coral/com.amazon.bedrock/"
# status -> exception name; other 4xx are ValidationException, other 5xx InternalServerException.
_ERRORS: dict[int, str] = {
    403: "AccessDeniedException",
    404: "ResourceNotFoundException",
    408: "ModelTimeoutException",
    424: "ModelErrorException",
    429: "ThrottlingException",
    503: "ServiceUnavailableException",
}
_STREAM_ERROR = {
    "serviceUnavailableException": {
        "message": "The service is temporarily unable to handle the request."
    }
}
_STRING = 7  # the event-stream header value type of a UTF-8 string
_AUTHORIZATION = re.compile(
    r"AWS4-HMAC-SHA256 Credential=(?P<key>[A-Z0-9]{16,128})/(?P<date>[0-9]{8})/"
    r"(?P<region>[a-z0-9-]{1,32})/(?P<service>[a-z0-9-]{1,64})/aws4_request,\s*"
    r"SignedHeaders=(?P<signed>[a-z0-9;-]{1,1000}),\s*Signature=(?P<signature>[0-9a-f]{64})"
)


def frame(headers: Mapping[str, str], payload: bytes) -> bytes:
    """One event-stream message: prelude (lengths, CRC), string headers, payload, CRC."""
    encoded = b""
    for name, value in headers.items():
        raw_name, raw_value = name.encode(), value.encode()
        encoded += struct.pack(">B", len(raw_name)) + raw_name
        encoded += struct.pack(">BH", _STRING, len(raw_value)) + raw_value
    prelude = struct.pack(">II", 12 + len(encoded) + len(payload) + 4, len(encoded))
    message = prelude + struct.pack(">I", zlib.crc32(prelude)) + encoded + payload
    return message + struct.pack(">I", zlib.crc32(message))


def event(name: str, data: Mapping[str, Any]) -> bytes:
    """A ConverseStream event; Bedrock pads each payload with a `p` field of filler."""
    payload = json.dumps({**data, "p": "abcdefghijklmnopqrstuvwxyzABCDEF"[: 1 + len(name)]})
    headers = {":event-type": name, ":content-type": "application/json", ":message-type": "event"}
    return frame(headers, payload.encode())


def exception_event(payload: StreamPayload) -> bytes:
    """`{"throttlingException": {"message": ...}}` as the exception message it stands for;
    `ValueError` for anything else (an event stream has no lists)."""
    if not isinstance(payload, dict) or len(payload) != 1:
        raise ValueError("a Bedrock exception event is one object: {exceptionName: {...}}")
    ((name, body),) = payload.items()
    headers = {
        ":exception-type": name,
        ":content-type": "application/json",
        ":message-type": "exception",
    }
    return frame(headers, json.dumps(body).encode())


def error_type(status: int) -> str:
    """The `x-amzn-ErrorType` header Bedrock sends with `status`."""
    default = "InternalServerException" if status >= 500 else "ValidationException"
    return _ERRORS.get(status, default) + _CORAL


def signature_problem(  # noqa: PLR0911 - one refusal per check, in the order AWS checks
    url: str, headers: Mapping[str, str], body: bytes, region: str
) -> tuple[int, str, str] | None:
    """(status, exception, message) AWS would refuse this POST with, or None if it is signed
    for `bedrock` in `region` with the test credentials."""
    authorization = headers.get("authorization")
    if authorization is None:
        return 403, "MissingAuthenticationTokenException", "Missing Authentication Token"
    parts = _AUTHORIZATION.fullmatch(authorization.strip())
    if parts is None or "x-amz-date" not in headers:
        return 400, "IncompleteSignatureException", "The request signature is incomplete."
    if parts["service"] != "bedrock":
        message = "Credential should be scoped to correct service: 'bedrock'."
        return 403, "InvalidSignatureException", message
    if parts["region"] != region:
        return 403, "InvalidSignatureException", "Credential should be scoped to a valid region."
    if parts["key"] != TEST_ACCESS_KEY_ID:
        message = "The security token included in the request is invalid."
        return 403, "UnrecognizedClientException", message
    signed = parts["signed"].split(";")
    if "host" not in signed or any(name not in headers for name in signed):
        return 400, "IncompleteSignatureException", "The request signature is incomplete."
    expected = _signature(url, {n: headers[n] for n in signed}, body, region)
    if not hmac.compare_digest(expected, parts["signature"]):
        return (
            403,
            "InvalidSignatureException",
            "The request signature we calculated does not match the signature you provided. "
            "Check your AWS Secret Access Key and signing method. Consult the service "
            "documentation for details.",
        )
    return None


def _signature(url: str, signed: Mapping[str, str], body: bytes, region: str) -> str:
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    request = AWSRequest(method="POST", url=url, data=body, headers=dict(signed))
    request.context["timestamp"] = signed["x-amz-date"]
    token = signed.get("x-amz-security-token")
    credentials = Credentials(TEST_ACCESS_KEY_ID, TEST_SECRET_ACCESS_KEY, token)
    signer = SigV4Auth(credentials, "bedrock", region)
    canonical = signer.canonical_request(request)
    return str(signer.signature(signer.string_to_sign(request, canonical), request))


def thinking_signature(text: str) -> str:
    """The signature the simulated model puts on its reasoning (and checks when it is back)."""
    return hashlib.sha256(f"relevo-sim:{text}".encode()).hexdigest()[:32]


class BedrockDialect:
    """`POST /model/{modelId}/converse` and `/converse-stream`."""

    api = "bedrock"
    separator = b""
    stream_content_type = EVENT_STREAM

    def __init__(self, model: str = "") -> None:
        self.model = model

    def for_model(self, model: str) -> BedrockDialect:
        """This dialect for a request to `model` (a Claude's refusals depend on it)."""
        return type(self)(model)

    def inspect(self, body: Mapping[str, Any]) -> Inspection:
        """Read messages, system, toolConfig, inferenceConfig.maxTokens and outputConfig;
        refuse what Converse refuses (`bedrock_request`), and a reasoning block sent back
        altered, as Bedrock refuses a bad thinking signature."""
        check_request(body, self.model)
        messages = body["messages"]
        for message in messages:
            for block in message["content"]:
                _check_reasoning(block)
        config = body.get("toolConfig") or {}
        names = tuple(t["toolSpec"]["name"] for t in config.get("tools", []) if "toolSpec" in t)
        limit = (body.get("inferenceConfig") or {}).get("maxTokens")
        return Inspection(
            model=None,
            stream=False,
            input_tokens=estimate_tokens(json.dumps([body.get("system"), messages])),
            message_count=len(messages),
            tools=names,
            max_tokens=limit,
            answer_schema=output_schema(body),
            forced_tool=forced_tool(body),
        )

    def reply_body(self, reply: CannedReply) -> dict[str, Any]:
        """A ConverseResponse with reasoning, text and toolUse blocks."""
        content: list[dict[str, Any]] = []
        if reply.reasoning_tokens:
            text = _thinking(reply)
            reasoning = {"reasoningText": {"text": text, "signature": thinking_signature(text)}}
            content.append({"reasoningContent": reasoning})
        if reply.tokens or reply.tool is None:
            content.append({"text": reply.text})
        if reply.tool is not None:
            use = {"toolUseId": _tool_id(reply), "name": reply.tool.name}
            content.append({"toolUse": {**use, "input": dict(reply.tool.arguments)}})
        return {
            "output": {"message": {"role": "assistant", "content": content}},
            "stopReason": _stop_reason(reply),
            "usage": _usage(reply),
            "metrics": {"latencyMs": 1},
        }

    def preamble(self, reply: CannedReply) -> list[bytes]:
        """messageStart, and the reasoning block (not content: the turn never shows it)."""
        out = [event("messageStart", {"role": "assistant"})]
        if reply.reasoning_tokens:
            text = _thinking(reply)
            for delta in ({"text": text}, {"signature": thinking_signature(text)}):
                body = {"contentBlockIndex": 0, "delta": {"reasoningContent": delta}}
                out.append(event("contentBlockDelta", body))
            out.append(event("contentBlockStop", {"contentBlockIndex": 0}))
        return out

    def pieces(self, reply: CannedReply) -> list[bytes]:
        """A text delta per token; the toolUse block's start, then its input in fragments."""
        index = _first_content(reply)
        out = [
            event("contentBlockDelta", {"contentBlockIndex": index, "delta": {"text": t}})
            for t in reply.tokens
        ]
        if reply.tool is not None:
            if reply.tokens:
                out[-1] += event("contentBlockStop", {"contentBlockIndex": index})
                index += 1
            start = {"toolUse": {"toolUseId": _tool_id(reply), "name": reply.tool.name}}
            out.append(event("contentBlockStart", {"contentBlockIndex": index, "start": start}))
            for part in fragments(reply.tool.arguments_json):
                delta = {"toolUse": {"input": part}}
                out.append(event("contentBlockDelta", {"contentBlockIndex": index, "delta": delta}))
        return out

    def ending(self, reply: CannedReply) -> list[bytes]:
        """contentBlockStop, messageStop with the stop reason, metadata with the usage."""
        last = _first_content(reply) + (1 if reply.tool is not None and reply.tokens else 0)
        return [
            event("contentBlockStop", {"contentBlockIndex": last}),
            event("messageStop", {"stopReason": _stop_reason(reply)}),
            event("metadata", {"usage": _usage(reply), "metrics": {"latencyMs": 1}}),
        ]

    def stream_error(self, payload: StreamPayload | None) -> bytes:
        """An exception message; serviceUnavailableException by default."""
        return exception_event(payload if payload is not None else _STREAM_ERROR)

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        """`{"message": ...}`: the exception's name travels in `x-amzn-ErrorType`."""
        return {"message": message}


def _check_reasoning(block: Any) -> None:
    reasoning = block.get("reasoningContent") if isinstance(block, dict) else None
    text = reasoning.get("reasoningText") if isinstance(reasoning, dict) else None
    if not isinstance(text, dict) or "signature" not in text:
        return
    if text["signature"] != thinking_signature(str(text.get("text"))):
        raise BadRequest("The reasoning block's signature does not match its content.")


def _thinking(reply: CannedReply) -> str:
    return f"Thinking about {reply.model}."


def _first_content(reply: CannedReply) -> int:
    return 1 if reply.reasoning_tokens else 0


def _tool_id(reply: CannedReply) -> str:
    assert reply.tool is not None
    return f"tooluse_sim{reply.tool.id}"


def _stop_reason(reply: CannedReply) -> str:
    if reply.filtered:
        return "content_filtered"
    if reply.tool is not None:
        return "tool_use"
    return "max_tokens" if reply.truncated else "end_turn"


def _usage(reply: CannedReply) -> dict[str, int]:
    # inputTokens leaves the cache out; outputTokens includes the reasoning.
    usage = {
        "inputTokens": reply.input_tokens,
        "outputTokens": reply.output_tokens,
        "totalTokens": reply.total_tokens,
    }
    if reply.cache_read_tokens:
        usage["cacheReadInputTokens"] = reply.cache_read_tokens
    if reply.cache_write_tokens:
        usage["cacheWriteInputTokens"] = reply.cache_write_tokens
    return usage
