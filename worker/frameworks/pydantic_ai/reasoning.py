"""A model's reasoning in a pydantic-ai `ThinkingPart`, so that it comes back whole.

pydantic-ai keeps a `ThinkingPart`'s `signature` unread and sends it back to the model
that wrote it (by `provider_name`). relevo's `Reasoning` (its origin, text, signature,
redacted or encrypted content: whatever the vendor needs back) goes there whole, as its
JSON in a versioned envelope, so reasoning round-trips losslessly whichever vendor wrote
it; relevo then sends it only to that vendor.
"""

from __future__ import annotations

import base64
import binascii

from pydantic import ValidationError
from pydantic_ai.exceptions import UserError

from worker.types import Reasoning

__all__ = ["RELEVO", "seal", "unseal"]

# The `system` of relevo's model, and the `provider_name` of what it writes.
RELEVO = "relevo"
_ENVELOPE = "relevo.v1:"


def seal(reasoning: Reasoning) -> str:
    """`reasoning` as a `ThinkingPart` signature."""
    data = reasoning.model_dump_json(exclude_defaults=True).encode()
    return _ENVELOPE + base64.urlsafe_b64encode(data).decode("ascii")


def unseal(signature: str) -> Reasoning:
    """The `Reasoning` a signature from `seal` holds; `UserError` if it is not one."""
    if not signature.startswith(_ENVELOPE):
        raise UserError("a relevo ThinkingPart's signature is not a relevo.v1 envelope")
    try:
        data = base64.urlsafe_b64decode(signature.removeprefix(_ENVELOPE).encode("ascii"))
        return Reasoning.model_validate_json(data)
    except (ValueError, binascii.Error, ValidationError):
        # The message never echoes the signature: it holds the model's reasoning.
        raise UserError("a relevo ThinkingPart's signature was changed: unreadable") from None
