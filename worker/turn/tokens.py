"""How many tokens a prompt can take, bounded from above for any tokenizer and script.

The estimate sizes every reservation and overdraft bound (docs/budgets.md) and decides
trimming, so it must not fall short of what a provider bills: every tokenizer in use
works on UTF-8 bytes (byte-level BPE) or falls back to them (SentencePiece), so no
text takes more tokens than it has bytes. Only runs of ASCII letters are counted for
less, at rates that hold for natural text in any language, code and JSON
(`tests/test_tokens.py` checks them against real tokenizers). Cheap by design: a few
passes of C code over the text's bytes, no tokenizer.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from worker.types import Message, Tool

__all__ = ["estimate_tokens", "message_tokens", "text_tokens", "tools_tokens"]

# Framing around the text, above what providers document or show: chat templates
# spend 3 to 6 tokens a message and a few to prime the reply; a tool call about 25
# beside its id, name and arguments; a function definition about 10 beside its
# schema; and with any tool Anthropic adds a tool-use system prompt of up to 530.
TOKENS_PER_REQUEST = 8
TOKENS_PER_MESSAGE = 8
TOKENS_PER_TOOL_CALL = 32
TOKENS_PER_TOOL = 16
TOKENS_WITH_TOOLS = 600


def _byte_classes() -> bytes:
    # Each byte of a text in one class: `a` a lowercase ASCII letter, `A` an uppercase
    # one, ` ` a space, `.` a punctuation mark (a space before it joins it), `x` any
    # other byte: a digit, a control character, a byte of a non-ASCII character.
    table = bytearray(b"x" * 256)
    table[33:127] = b"." * 94
    table[48:58] = b"x" * 10
    table[65:91] = b"A" * 26
    table[97:123] = b"a" * 26
    table[32] = ord(" ")
    return bytes(table)


_CLASSES = _byte_classes()
_LETTERS = bytes.maketrans(b"aA x.", b"LL...")


def estimate_tokens(messages: Sequence[Message], tools: Sequence[Tool] = ()) -> int:
    """At least the tokens a provider bills for `messages` and `tools` as input.

    It adds up: `estimate_tokens(m, t) == estimate_tokens(m) + tools_tokens(t)`.
    """
    if not messages:
        return tools_tokens(tools)
    return TOKENS_PER_REQUEST + sum(map(message_tokens, messages)) + tools_tokens(tools)


def message_tokens(message: Message) -> int:
    """One message's share of `estimate_tokens`: its text, calls, reasoning and framing."""
    # Its texts are counted as one, a newline between each (a token more, and no run
    # of letters across two texts): one count instead of a few small ones.
    texts = [message.text]
    blobs = 0
    if message.tool_call_id is not None:
        texts.append(message.tool_call_id)
    for call in message.tool_calls:
        # The arguments as the OpenAI adapter sends them, escapes and all: the larger form.
        texts += (call.id, call.name, json.dumps(call.arguments))
        blobs += _blob_tokens(call.signature)
    for thought in message.reasoning:
        texts.append(thought.text)
        blobs += _blob_tokens(thought.signature) + _blob_tokens(thought.redacted)
    tokens = TOKENS_PER_MESSAGE + TOKENS_PER_TOOL_CALL * len(message.tool_calls) + blobs
    return tokens + text_tokens(texts[0] if len(texts) == 1 else "\n".join(texts))


def tools_tokens(tools: Sequence[Tool]) -> int:
    """The tool definitions' share of `estimate_tokens`."""
    if not tools:
        return 0
    tokens = TOKENS_WITH_TOOLS
    texts = (f"{t.name}\n{t.description}\n{json.dumps(t.parameters)}" for t in tools)
    return tokens + TOKENS_PER_TOOL * len(tools) + text_tokens("\n".join(texts))


def text_tokens(text: str) -> int:
    """At least the tokens that a byte-level or byte-fallback tokenizer makes of `text`.

    Every UTF-8 byte counts one token, except ASCII letters and spaces: a run of
    letters counts one, plus one per uppercase letter, a third per lowercase one and
    one per lowercase letter that follows an uppercase one;
    a space counts only before a digit, a control or a non-ASCII character or at the
    end, and a run of n spaces counts n/4 (at least one).
    """
    if not text:
        return 0
    classes = text.encode("utf-8", "surrogatepass").translate(_CLASSES)
    size = len(classes)
    lower = classes.count(b"a")
    spaces = classes.count(b" ")
    tokens = size - lower - spaces + (lower + 2) // 3
    upper = classes.count(b"A")
    letters = lower + upper
    if upper and lower:
        # A change of case starts a token in mixed-case text (base64, identifiers).
        tokens += classes.count(b"Aa")
    if letters:
        # Runs are counted by their start or by their end, whichever byte of the
        # pattern is the rarer: a count is slow when its first byte is common.
        runs = classes.translate(_LETTERS)
        if 2 * letters > size:
            tokens += runs.count(b".L") + (runs[0] == ord("L"))
        else:
            tokens += runs.count(b"L.") + (runs[-1] == ord("L"))
    if spaces:
        tokens += classes.count(b" x") + (classes[-1] == ord(" "))
        # floor(n/2) - floor(n/4) for a run of n: one for 2 to 5 spaces, then n/4.
        tokens += classes.count(b"  ") - classes.count(b"    ")
    return tokens


def _blob_tokens(blob: str | None) -> int:
    # A signature or encrypted thinking is base64 of at most what the provider bills as
    # thinking: no more tokens than the bytes it decodes to.
    return 0 if blob is None else -(-len(blob) * 3 // 4)
