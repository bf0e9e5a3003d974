"""The one envelope a framework model keeps relevo's reasoning in between two requests.

A framework hands back what a model wrote (a pydantic-ai `ThinkingPart`'s `signature`, an
Agents SDK reasoning item's `encrypted_content`) unread. relevo puts there the JSON of what
the vendor needs back, whole, behind a version: `relevo.v1:` and base64. It is written in
the standard alphabet; what was ever written in the URL-safe one (`-`, `_`) still reads.
"""

from __future__ import annotations

import base64
import binascii
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from worker.errors import InputError

__all__ = ["ENVELOPE", "EnvelopeError", "is_sealed", "open_envelope", "seal"]

M = TypeVar("M", bound=BaseModel)
ENVELOPE = "relevo.v1:"
# The URL-safe alphabet's two letters in the standard one's places: the two never share one.
_STANDARD = str.maketrans("-_", "+/")


class EnvelopeError(InputError):
    """A `relevo.v1:` envelope that was changed: it does not read back."""


def seal(content: BaseModel) -> str:
    """`content` in the envelope: its JSON, in base64."""
    data = content.model_dump_json(exclude_defaults=True).encode()
    return ENVELOPE + base64.b64encode(data).decode("ascii")


def is_sealed(text: str | None) -> bool:
    """Whether `text` is in relevo's envelope (anyone else's is not)."""
    return text is not None and text.startswith(ENVELOPE)


def open_envelope(text: str, kind: type[M]) -> M:
    """The `kind` an envelope holds; `EnvelopeError` if it is not one, or was changed."""
    if not is_sealed(text):
        raise EnvelopeError(f"not a {ENVELOPE.rstrip(':')} envelope")
    try:
        data = base64.b64decode(text.removeprefix(ENVELOPE).translate(_STANDARD), validate=True)
        return kind.model_validate_json(data)
    except (ValueError, binascii.Error, ValidationError):
        # The message never echoes the envelope: it holds the model's reasoning.
        raise EnvelopeError("a relevo envelope was changed: unreadable") from None
