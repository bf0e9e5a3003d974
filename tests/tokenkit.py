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
