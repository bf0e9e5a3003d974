"""Runs of letters are bounded too: sequences, slugs, compounds, ciphers, noise.

Checked against every tokenizer tests/tokenkit.py loads. A run of letters that is a word
of the estimate's dictionary counts a third of a token a letter, which every tokenizer
was checked to hold for that word (the dictionary is rebuilt and compared here); any
other run counts a token a letter, the bytes bound. So short runs as well as long ones,
one run or thousands, never make more tokens than their estimate (docs/budgets.md, "The
input estimate"). SentencePiece's leading word mark is the one token a text may add.
"""

from __future__ import annotations

import codecs
import gzip
import random
import re
import string
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests import tokenkit
from worker.turn import tokens
from worker.turn.tokens import estimate_tokens, text_tokens
from worker.types import Message

COUNTERS = tokenkit.counters()
ROOT = Path(__file__).resolve().parent.parent
ENGLISH = sorted(set(re.findall(r"[A-Za-z]+", "\n".join(tokenkit.sources()["english"]))))
DICTIONARY = sorted(word.decode() for word in tokens._words())


def _noise(alphabet: str, size: int, seed: int = 7) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice(alphabet) for _ in range(size))


def _short_runs(alphabet: str, runs: int = 400, letters: int = 11, sep: str = " ") -> str:
    rng = random.Random(7)
    return sep.join("".join(rng.choice(alphabet) for _ in range(letters)) for _ in range(runs))


FINNISH = (
    "lentokonesuihkuturbiinimoottoriapumekaanikkoaliupseerioppilas"
    "kolmivaihekilowattituntimittari"
    "yhdyssanakirjoitusvirhe"
    "epajarjestelmallistyttamattomyydellansakaan"
    "hevosenkengittajaoppilaitos"
)
LOREM = (
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor "
    "incididunt ut labore et dolore magna aliqua. Ut enim ad minim veniam, quis nostrud "
    "exercitation ullamco laboris nisi ut aliquip ex ea commodo consequat."
)
SLUGS = "-".join(
    (
        "how-to-bound-the-tokens-of-a-prompt-without-a-tokenizer",
        "bestrunningshoesforflatfeet",
        "quarterlyreportnorthwestregionfinal",
        "whyourreservationsholdtheworstcase",
    )
)
# Long runs (most tokens over the estimate before runs were counted at all: 1.2 to 1.9)
# and short runs (before the dictionary: 1.45 to 2.36), a few thousand letters each.
PINNED = {
    "random consonants": _noise("bcdfghjklmnpqrstvwxz", 4000),
    "random lowercase": _noise(string.ascii_lowercase, 4000),
    "dna": _noise("acgt", 40_000),
    "url slugs": (SLUGS.lower() + "/") * 20,
    "welsh place name": "llanfairpwllgwyngyllgogerychwyrndrobwllllantysiliogogogoch" * 40,
    "finnish compounds": FINNISH * 20,
    "lorem ipsum without spaces": re.sub(r"[^A-Za-z]", "", LOREM) * 20,
    "runs of 11 random lowercase letters": _short_runs(string.ascii_lowercase),
    "runs of 11 random consonants": _short_runs("bcdfghjklmnpqrstvwxz"),
    "runs of 11 rare letters": _short_runs("jkqvwxz"),
    "runs of 11 letters between hyphens": _short_runs(string.ascii_lowercase, sep="-"),
    "qo pairs in runs of 11": " ".join([("qo" * 6)[:11]] * 400),
    "zq pairs in runs of 11": " ".join([("zq" * 6)[:11]] * 400),
    "rot13 of prose": codecs.encode((ROOT / "docs" / "budgets.md").read_text(), "rot13"),
}


def most_tokens(text: str) -> int:
    return max(count(text) for count in COUNTERS.values())


def test_the_dictionary_is_what_the_tokenizers_hold() -> None:
    # Every word checked against every tokenizer (about 10 s): the dictionary's rate is
    # measured for each of its words, not assumed.
    shipped = gzip.decompress(tokens._WORDS_FILE.read_bytes()).decode().split()
    assert shipped == tokenkit.letter_words()


@pytest.mark.parametrize("name", sorted(PINNED))
def test_each_pinned_text_is_bounded_by_every_tokenizer(name: str) -> None:
    text = PINNED[name]
    for tokenizer, count in COUNTERS.items():
        assert count(text) <= text_tokens(text) + 1, tokenizer


def test_letter_pairs_no_vocabulary_holds_count_a_token_a_letter() -> None:
    # Mistral's tokenizers take "qo" as two tokens, o200k "zq": the worst a letter costs.
    for pair in ("qo", "zq"):
        assert pair not in DICTIONARY
        text = pair * 3000
        assert most_tokens(text) == len(text)
        assert text_tokens(text) >= len(text)
        short = " ".join([pair * 5] * 100)
        assert most_tokens(short) <= text_tokens(short)


def test_words_of_the_dictionary_stay_at_a_third_of_a_token_a_letter() -> None:
    prose = "the estimate counts words of english prose as before"
    assert all(word in DICTIONARY for word in prose.split())
    letters = sum(map(len, prose.split()))
    assert text_tokens(prose) == len(prose.split()) + -(-letters // 3)


LETTERS = string.ascii_letters
RUN_OF = st.integers(1, 11) | st.integers(12, 40)
LOWER = RUN_OF.flatmap(
    lambda n: st.text(st.sampled_from(string.ascii_lowercase), min_size=n, max_size=n)
)
MIXED = RUN_OF.flatmap(lambda n: st.text(st.sampled_from(LETTERS), min_size=n, max_size=n))
# Letters no vocabulary joins, two to four of them.
FEW_LETTERS = st.lists(st.sampled_from(LETTERS), min_size=1, max_size=4).flatmap(
    lambda alphabet: st.text(st.sampled_from(alphabet), min_size=1, max_size=24)
)
SYLLABLES = st.lists(
    st.text(st.sampled_from(string.ascii_lowercase), min_size=1, max_size=4),
    min_size=1,
    max_size=4,
).flatmap(lambda syllables: st.lists(st.sampled_from(syllables), min_size=1, max_size=8))
WORD = st.sampled_from(DICTIONARY) | st.sampled_from(ENGLISH)
CASED_WORD = st.tuples(WORD, st.sampled_from(["lower", "capitalize", "upper", "swapcase"])).map(
    lambda pair: getattr(pair[0], pair[1])()
) | st.tuples(WORD, st.lists(st.booleans(), min_size=40, max_size=40)).map(
    lambda pair: "".join(c.upper() if up else c for c, up in zip(pair[0], pair[1], strict=False))
)
JOINED = st.lists(CASED_WORD, min_size=2, max_size=4).map("".join)
RUN = st.one_of(
    LOWER,
    MIXED,
    FEW_LETTERS,
    SYLLABLES.map("".join),
    SYLLABLES.map(lambda s: "".join(s).upper()),
    CASED_WORD,
    CASED_WORD,
    JOINED,
)
SEPARATOR = st.sampled_from(
    [" ", " ", " ", "  ", "\n", "-", "_", ".", ", ", "(", ")", "/", ":", "'", "1", ""]
)
# Runs of one kind repeated (the worst of a kind adds up), or of any kinds mixed.
TEXT = st.one_of(
    st.tuples(RUN, SEPARATOR, st.integers(1, 60)).map(lambda t: t[1].join([t[0]] * t[2])),
    st.lists(st.tuples(RUN, SEPARATOR), min_size=1, max_size=60).map(
        lambda parts: "".join(run + sep for run, sep in parts)
    ),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(TEXT)
@example("qo" * 2000)
@example(PINNED["zq pairs in runs of 11"])
@example(PINNED["runs of 11 rare letters"])
@example("\n".join(["fleet"] * 100))
@example(" ".join(["Zqzqzqzqzqz"] * 100))
def test_no_tokenizer_makes_more_of_runs_of_letters_than_their_bound(text: str) -> None:
    for name, count in COUNTERS.items():
        assert count(text) <= text_tokens(text) + 1, name
    # In a message, the framing covers a chat template's own.
    message = Message(role="user", content=text)
    assert most_tokens(f"<|user|>\n{text}") <= estimate_tokens([message])
