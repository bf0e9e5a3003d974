"""A request body as JSON bytes, with its attachments' base64 spliced in, not re-encoded.

An image or a PDF travels as base64 (a megabyte of it is 1.4 MB of text), which needs
no escaping in JSON. Passed to the JSON encoder, every byte of it is scanned for
characters to escape, on every attempt: a millisecond a megabyte. An adapter marks such
a string `Verbatim`; `encode_body` leaves a placeholder for it in the JSON and joins the
string in as it is.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

__all__ = ["Verbatim", "encode_body"]


class Verbatim(str):
    """A string that JSON carries as it is: only make one of base64 (validated as such
    where the turn entered) and of plain ASCII around it (a data URL's prefix)."""

    __slots__ = ()


def encode_body(body: Any, *, spliced: bool = True) -> bytes:
    """`body` as UTF-8 JSON, each `Verbatim` string in it joined in unescaped; with
    `spliced` false (no attachment in it) it is not looked through for any."""
    if not spliced:
        return json.dumps(body, ensure_ascii=False).encode()
    found: list[Verbatim] = []
    # A placeholder no caller's text holds: a NUL and a random tag, escaped by the encoder.
    tag = f"\x00{secrets.token_hex(8)}:"
    encoded = json.dumps(_hollowed(body, found, tag), ensure_ascii=False).encode()
    if not found:
        return encoded
    marker = json.dumps(tag, ensure_ascii=False).encode()[1:-1]
    pieces = encoded.split(marker)
    out = [pieces[0]]
    for piece in pieces[1:]:
        index, rest = piece.split(b'"', 1)
        out += (found[int(index)].encode(), b'"', rest)
    return b"".join(out)


def _hollowed(node: Any, found: list[Verbatim], tag: str) -> Any:
    if isinstance(node, Verbatim):
        found.append(node)
        return f"{tag}{len(found) - 1}"
    if isinstance(node, dict):
        return {key: _hollowed(value, found, tag) for key, value in node.items()}
    if isinstance(node, list | tuple):
        return [_hollowed(item, found, tag) for item in node]
    return node
