"""How many tokens a prompt can take, bounded from above for any tokenizer and script.

The estimate sizes every reservation and overdraft bound (docs/budgets.md) and decides
trimming, so it must not fall short of what a provider bills: every tokenizer in use
works on UTF-8 bytes (byte-level BPE) or falls back to them (SentencePiece), so no
text takes more tokens than it has bytes. Only ASCII letters and spaces are counted
for less: the letters of a word every tokenizer holds (a dictionary of them, checked
word by word), and spaces, at rates that hold for natural text in any language, code
and JSON (`tests/test_tokens.py` checks them against real tokenizers). Cheap by design:
a few passes of C code over the text's bytes and a set look-up a word, no tokenizer.
Images and PDFs count as their model's vendor bills them (`worker.turn.media`); the
turn's options (a response schema, stop sequences, a forced tool) as the text they add.
"""

from __future__ import annotations

import functools
import gzip
import json
from collections.abc import Sequence
from itertools import filterfalse, repeat
from pathlib import Path

from worker.turn.media import TOKENS_PER_ATTACHMENT, MediaRule, media_rule
from worker.types import (
    DocumentPart,
    ImagePart,
    JsonSchemaFormat,
    Message,
    NamedTool,
    Tool,
    TurnRequest,
)

__all__ = [
    "estimate_tokens",
    "message_tokens",
    "options_tokens",
    "text_tokens",
    "tools_tokens",
    "unsized_tokens",
]

# Framing around the text, above what providers document or show: chat templates
# spend 3 to 6 tokens a message and a few to prime the reply; a tool call about 25
# beside its id, name and arguments; a function definition about 26 beside its
# schema; and with any tool Anthropic adds a tool-use system prompt of up to 530.
TOKENS_PER_REQUEST = 8
TOKENS_PER_MESSAGE = 8
TOKENS_PER_TOOL_CALL = 32
# Mistral's template wraps each tool as {"type": "function", "function": {...}}: about
# 25 tokens for a tool with an empty name and description.
TOKENS_PER_TOOL = 26
TOKENS_WITH_TOOLS = 600
# A tool_choice is a line or two of the template (Anthropic's "any" or "tool").
TOKENS_FOR_TOOL_CHOICE = 16
# Any vendor's rule: what an attachment counts when the model is not known.
_ANY = media_rule("")
# A lowercase letter counts a third of a token in a word every tokenizer holds: one of
# `letter_words.txt.gz`, the runs of letters the four tokenizers of the tests hold as a
# token, each kept only if none of them makes more of it than that rate after a space,
# a newline, a tab, a digit or a punctuation mark, and capitalized (written by
# `python -m tests.tokenkit`; a test checks it). Any other run of letters (a sequence,
# a slug, an identifier, random letters, letter pairs no vocabulary holds) counts a
# token a letter, the bytes bound: a third a letter holds for no rule on letters short
# of the tokenizer itself (`qoqo` and `zqzq` take a token a letter; letters whose every
# piece of five all four vocabularies hold, up to 0.56 a letter).
_WORDS_FILE = Path(__file__).with_name("letter_words.txt.gz")
# Letters kept, anything else a space: the text's runs of letters by `bytes.split`, the
# one split in C.
_RUNS = bytes(c if 65 <= c <= 90 or 97 <= c <= 122 else 32 for c in range(256))
_UPPER = bytes(range(65, 91))


@functools.cache
def _words() -> frozenset[bytes]:
    # Each word lowercase and capitalized, the two forms checked: in any other casing
    # ("aaA", camelCase) a run is not a word.
    words = gzip.decompress(_WORDS_FILE.read_bytes()).split()
    return frozenset(words + [word.capitalize() for word in words])


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
# Every byte but the control characters JSON escapes as \u00XX (tab, newline and carriage
# return have short escapes): deleting these leaves the text's control characters.
_NOT_CONTROL = bytes(c for c in range(256) if not ((c < 32 and c not in (9, 10, 13)) or c == 127))
_LETTERS = bytes.maketrans(b"aA x.", b"LL...")


def estimate_tokens(
    messages: Sequence[Message], tools: Sequence[Tool] = (), media: MediaRule = _ANY
) -> int:
    """At least the tokens a provider bills for `messages` and `tools` as input, the
    images and PDFs counted as `media` says (unset: as the vendor that bills the most).

    It adds up: `estimate_tokens(m, t) == estimate_tokens(m) + tools_tokens(t)`.
    """
    if not messages:
        return tools_tokens(tools)
    tokens = TOKENS_PER_REQUEST + sum(map(message_tokens, messages, repeat(media)))
    return tokens + unsized_tokens(messages, media) + tools_tokens(tools)


def message_tokens(message: Message, media: MediaRule = _ANY) -> int:
    """One message's share of `estimate_tokens`: its text, attachments, calls, reasoning
    and framing; an attachment whose size is unknown is left to `unsized_tokens`."""
    # Its texts are counted as one, a newline between each (a token more, and no run
    # of letters across two texts): one count instead of a few small ones.
    content = message.content
    texts = [content if content.__class__ is str else message.text]
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
    if content.__class__ is not str:
        tokens += _attachments(message, media, sized=True)
    return tokens + text_tokens(texts[0] if len(texts) == 1 else "\n".join(texts))


def unsized_tokens(messages: Sequence[Message], media: MediaRule = _ANY) -> int:
    """What the attachments of unknown size (by URL, or data that does not parse) add
    to `estimate_tokens`: each counts as the largest its vendor takes."""
    with_parts = [m for m in messages if m.content.__class__ is not str]
    return sum(_attachments(m, media, sized=False) for m in with_parts) if with_parts else 0


def _attachments(message: Message, media: MediaRule, *, sized: bool) -> int:
    tokens = 0
    for part in message.attachments:
        if isinstance(part, ImagePart):
            count = media.image_tokens(part)
            largest = media.largest_image
        else:
            count = media.document_tokens(part)
            largest = media.largest_document
        if count is None:
            tokens += 0 if sized else largest + _framing(part)
        elif sized:
            tokens += count + _framing(part)
    return tokens


def _framing(part: ImagePart | DocumentPart) -> int:
    name = part.name if isinstance(part, DocumentPart) else None
    return TOKENS_PER_ATTACHMENT + (0 if name is None else text_tokens(name))


def options_tokens(request: TurnRequest, tools: Sequence[Tool]) -> int:
    """What the turn's options add to its prompt beside `tools`: the answer's schema,
    stop sequences and a forced tool; 0 when none is set."""
    tokens = 0
    answer = request.response_format
    if answer is not None:
        # Providers put the schema in the prompt, and an API without structured output
        # takes it as a forced tool: a tool definition, and the tool-use prompt.
        if isinstance(answer, JsonSchemaFormat):
            schema = f"{answer.name}\n{json.dumps(answer.json_schema)}"
        else:
            schema = 'json\n{"type": "object"}'
        tokens += TOKENS_PER_TOOL + (0 if tools else TOKENS_WITH_TOOLS) + text_tokens(schema)
    if request.stop:
        tokens += TOKENS_PER_MESSAGE + text_tokens("\n".join(request.stop))
    choice = request.tool_choice
    if choice is not None:
        tokens += TOKENS_FOR_TOOL_CHOICE
        if isinstance(choice, NamedTool):
            tokens += text_tokens(choice.name)
    return tokens


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
    one per lowercase letter that follows an uppercase one; in a run that is not a word
    of the dictionary (lowercase or capitalized) each lowercase letter counts two
    thirds more, so a token a letter or more; a space counts only before a digit, a
    control or a non-ASCII character or at the end, and a run of n spaces counts n/4
    (at least one).
    """
    if not text:
        return 0
    data = text.encode("utf-8", "surrogatepass")
    classes = data.translate(_CLASSES)
    size = len(classes)
    lower = classes.count(b"a")
    spaces = classes.count(b" ")
    tokens = size - lower - spaces + (lower + 2) // 3
    upper = classes.count(b"A")
    letters = lower + upper
    if lower:
        # Runs split in C, looked up in C: a few tens of ns a word. Uppercase letters
        # count a token each already.
        unknown = b"".join(filterfalse(_words().__contains__, data.translate(_RUNS).split()))
        if unknown:
            tokens += (2 * len(unknown.translate(None, _UPPER)) + 2) // 3
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
    controls = len(data.translate(None, _NOT_CONTROL))
    if controls:
        # A chat template that writes a tool result as JSON escapes each as \u00XX.
        tokens += 5 * controls
    if spaces:
        tokens += classes.count(b" x") + (classes[-1] == ord(" "))
        # floor(n/2) - floor(n/4) for a run of n: one for 2 to 5 spaces, then n/4.
        tokens += classes.count(b"  ") - classes.count(b"    ")
    return tokens


def _blob_tokens(blob: str | None) -> int:
    # A signature or encrypted thinking is base64 of at most what the provider bills as
    # thinking: no more tokens than the bytes it decodes to.
    return 0 if blob is None else -(-len(blob) * 3 // 4)
