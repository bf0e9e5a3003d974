"""A model's reasoning in a pydantic-ai `ThinkingPart`, so that it comes back whole.

pydantic-ai keeps a `ThinkingPart`'s `signature` unread and sends it back to the model
that wrote it (by `provider_name`). relevo's `Reasoning` (its origin, text, signature,
redacted or encrypted content: whatever the vendor needs back) goes there whole, in
relevo's envelope (`worker.frameworks.envelope`), so reasoning round-trips losslessly
whichever vendor wrote it; relevo then sends it only to that vendor.
"""

from __future__ import annotations

from worker.frameworks import envelope
from worker.frameworks.pydantic_ai.errors import PydanticAIInputError
from worker.types import Reasoning

__all__ = ["RELEVO", "seal", "unseal"]

# The `system` of relevo's model, and the `provider_name` of what it writes.
RELEVO = "relevo"


def seal(reasoning: Reasoning) -> str:
    """`reasoning` as a `ThinkingPart` signature."""
    return envelope.seal(reasoning)


def unseal(signature: str) -> Reasoning:
    """The `Reasoning` a signature from `seal` holds; `PydanticAIInputError` if it is not
    one, or was changed (never sent on)."""
    try:
        return envelope.open_envelope(signature, Reasoning)
    except envelope.EnvelopeError as exc:
        raise PydanticAIInputError(f"a relevo ThinkingPart's signature: {exc}") from None
