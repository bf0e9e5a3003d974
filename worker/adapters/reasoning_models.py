"""Which models reason, known by their id, as `claude_options` knows Claude's generations.

A reasoning model takes a turn's `reasoning_effort` (and, on OpenAI, refuses the sampling
fields); one that does not reason refuses the effort (and, on the Responses API, the
encrypted reasoning it would send back). OpenAI's o-series and GPT-5 family reason, but
not GPT-5's chat models (`gpt-5-chat-latest`), which are the non-reasoning model behind
ChatGPT; Gemini 2.5 and Gemini 3 think, but not their image, speech and live models. An
id that names none of these (an Azure deployment's own name, an alias behind a gateway,
a Claude, whose thinking `ModelSettings.thinking_budget_tokens` or the setting asks for)
is taken for a model that does not reason. `ModelSettings.reasoning`, when set, overrides
what the id says, either way.
"""

from __future__ import annotations

import re

__all__ = ["openai_reasoning", "reasons", "reasons_by_id"]

# A gateway's vendor prefix ("openai/gpt-5") is allowed; a Bedrock id ("openai.gpt-oss")
# is not an OpenAI API model.
_OPENAI = re.compile(r"^(?:[a-z0-9_-]+/)?(?:o[1-9]|gpt-5)(?![0-9])(?!.*-chat)", re.IGNORECASE)
_GEMINI = re.compile(
    r"^(?:[a-z0-9_-]+/)?gemini-(?:2\.5|[3-9])(?:[.-])(?!.*(?:image|tts|live|audio|embedding))",
    re.IGNORECASE,
)


def reasons_by_id(model_id: str) -> bool:
    """Whether the model `model_id` names is one that reasons (o3, gpt-5-mini, gemini-2.5-pro)."""
    return bool(_OPENAI.match(model_id) or _GEMINI.match(model_id))


def openai_reasoning(model_id: str) -> bool:
    """Whether `model_id` names one of OpenAI's reasoning models (o3, gpt-5-mini,
    openai/o4-mini behind a gateway), which take `max_completion_tokens` only."""
    return bool(_OPENAI.match(model_id))


def reasons(model_id: str, setting: bool | None) -> bool:
    """The model's `reasoning` setting where it is set, else what its id says."""
    return reasons_by_id(model_id) if setting is None else setting
