"""Real tokenizers, loaded offline from files that PyPI packages ship, and texts to count.

- OpenAI's `o200k_base` (GPT-4o and later) and `cl100k_base` (GPT-4): tiktoken's own
  encoding constructors, their ranks files read from the copies `bpe-openai` ships
  (byte-identical: tiktoken checks each against its pinned SHA-256), never downloaded.
- Mistral's tokenizers from `mistral-common`: Tekken (tiktoken-style, 131k) and the
  SentencePiece one of Mistral 7B and Mixtral (32k, bytes as fallback): the least
  efficient in use, one token per digit and up to three per CJK character.
"""

from __future__ import annotations

import functools
import gzip
import importlib.util
import json
import os
import re
import sys
import sysconfig
import tempfile
from collections.abc import Callable
from pathlib import Path
from unittest import mock

import tiktoken
import tiktoken.load
from tiktoken_ext import openai_public

Counter = Callable[[str], int]

ROOT = Path(__file__).resolve().parent.parent


def _bundled_ranks(blobpath: str) -> bytes:
    name = blobpath.rsplit("/", 1)[-1]  # o200k_base.tiktoken
    # Found, not imported: the package loads every encoding as it is imported.
    spec = importlib.util.find_spec("bpe_openai")
    assert spec is not None, "bpe-openai is not installed"
    assert spec.submodule_search_locations
    packed = Path(spec.submodule_search_locations[0]) / "data" / f"{name}.gz"
    if not packed.is_file():
        raise FileNotFoundError(f"no bundled copy of {name}: refusing to download it")
    return gzip.decompress(packed.read_bytes())


def openai_encoding(name: str) -> tiktoken.Encoding:
    """tiktoken's `name` encoding, built by its own constructor from the bundled ranks."""
    saved = os.environ.get("TIKTOKEN_CACHE_DIR")
    with tempfile.TemporaryDirectory() as empty_cache:
        # An empty cache makes tiktoken read (our) source and check its hash.
        os.environ["TIKTOKEN_CACHE_DIR"] = empty_cache
        try:
            with mock.patch.object(tiktoken.load, "read_file", _bundled_ranks):
                return tiktoken.Encoding(**openai_public.ENCODING_CONSTRUCTORS[name]())
        finally:
            if saved is None:
                del os.environ["TIKTOKEN_CACHE_DIR"]
            else:
                os.environ["TIKTOKEN_CACHE_DIR"] = saved


def _mistral(make: Callable[[], object]) -> Counter:
    tokenizer = make().instruct_tokenizer.tokenizer  # type: ignore[attr-defined]
    return lambda text: len(tokenizer.encode(text, bos=False, eos=False))


@functools.cache
def counters() -> dict[str, Counter]:
    """Every tokenizer by name: how many tokens it makes of a text."""
    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

    o200k, cl100k = openai_encoding("o200k_base"), openai_encoding("cl100k_base")
    return {
        "o200k": lambda text: len(o200k.encode_ordinary(text)),
        "cl100k": lambda text: len(cl100k.encode_ordinary(text)),
        "mistral-tekken": _mistral(lambda: MistralTokenizer.v3(is_tekken=True)),
        "mistral-sentencepiece": _mistral(MistralTokenizer.v1),
    }


# Where a word of the dictionary is checked, and what the estimate counts for what comes
# before it: a space before letters counts nothing, anything else one. A digit or a
# newline is a token of its own, so the word is counted alone; a space, a tab or a
# punctuation mark may join the word's first token.
WORD_CONTEXTS = {" ": 0, "\n": 1, "\t": 1, "1": 1, "(": 1, "_": 1, "/": 1, "@": 1, "-": 1, ".": 1}
_LETTERS = re.compile(r"[a-z]+")


def _letter_pieces() -> set[str]:
    """Every run of letters that one of the four tokenizers holds as a token (a leading
    space or SentencePiece's word mark taken off), lowercase or capitalized, in
    lowercase: the candidate words."""
    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

    pieces: set[str] = set()
    for name in ("o200k_base", "cl100k_base"):
        for raw in openai_encoding(name)._mergeable_ranks:
            pieces.add(raw.decode("utf-8", "replace").removeprefix(" "))
    for make in (lambda: MistralTokenizer.v3(is_tekken=True), MistralTokenizer.v1):
        tokenizer = make().instruct_tokenizer.tokenizer
        for i in range(tokenizer.n_words):
            pieces.add(tokenizer.id_to_piece(i).removeprefix(" ").removeprefix("\u2581"))
    return {p.lower() for p in pieces if _LETTERS.fullmatch(p[:1].lower() + p[1:])}


def word_holds(word: str) -> bool:
    """Whether no tokenizer makes more of `word` than a word's rate (one token, plus a
    third a letter), after any of `WORD_CONTEXTS`, and capitalized after a space (one
    more, for the capital)."""
    # A text before it, so that SentencePiece's leading mark is not counted, ending in a
    # character that joins none of the contexts.
    prefix = "x\u4e2d"
    rate = 1 + len(word) / 3
    capital = " " + word[0].upper() + word[1:]
    for count in counters().values():
        before = count(prefix)
        for context, cost in WORD_CONTEXTS.items():
            if count(prefix + context + word) - before > cost + rate:
                return False
        if count(prefix + capital) - before > 1 + rate:
            return False
    return True


def letter_words() -> list[str]:
    """The dictionary `worker.turn.tokens` ships: every candidate word that holds."""
    return sorted(word for word in _letter_pieces() if word_holds(word))


@functools.cache
def sources() -> dict[str, tuple[str, ...]]:
    """Real texts by kind: English prose (markdown), code, and samples in other scripts."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    code = [
        *sorted((ROOT / "worker").rglob("*.py"))[::5],
        *(ROOT / "worker/console/static").iterdir(),
    ]
    code += [stdlib / name for name in ("textwrap.py", "json/encoder.py", "argparse.py", "csv.py")]
    return {
        "english": tuple(p.read_text() for p in sorted((ROOT / "docs").glob("*.md"))),
        "code": tuple(p.read_text() for p in code if p.is_file()),
        "scripts": tuple(SAMPLES.values()),
    }


# One paragraph per language or kind, written for these tests.
SAMPLES: dict[str, str] = json.loads((Path(__file__).with_name("token_samples.json")).read_text())


if __name__ == "__main__":
    # python -m tests.tokenkit > worker/turn/letter_words.txt   (~30 s)
    sys.stdout.write("".join(f"{word}\n" for word in letter_words()))
