"""Text made of many short runs of letters, where a rule on letters is no bound.

The estimate counts a lowercase letter a third of a token only in a word of its
dictionary, words every tokenizer holds at that rate, and a token a letter in any other
run (`worker.turn.tokens.text_tokens`); a third a letter in every short run would fall
short 1.45 (random letters) to 2.36 times (`zq` pairs). For each kind of such text (400
runs of 11 letters between spaces, ROT13 of docs/budgets.md), the most tokens any of the
four test tokenizers makes (`tests/tokenkit.py`: o200k, cl100k, Mistral Tekken and
SentencePiece) over the estimate, and the tokenizer that makes them; then what one turn
of `zq` pairs is billed at GPT-4o's prices ($2.50 / $10 per million tokens, o200k's count
and every `max_tokens` written) over its reserved worst case (the estimate padded by
20 %). Every figure is at most 1 where the estimate is a bound.

    .venv/bin/python bench/short_runs.py     # ~10 s

Output: `FIGURE <name> <value> <unit>` lines on stdout.
"""

from __future__ import annotations

import codecs
import random
import string
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests import tokenkit  # noqa: E402
from worker.settings.providers import ModelSettings  # noqa: E402
from worker.turn.pricing import reservation_micros  # noqa: E402
from worker.turn.tokens import estimate_tokens, text_tokens  # noqa: E402
from worker.types import Message  # noqa: E402

RUNS = 400
RUN_LETTERS = 11
MAX_TOKENS = 16


def texts() -> dict[str, str]:
    rng = random.Random(7)

    def words(alphabet: str) -> str:
        return " ".join(
            "".join(rng.choice(alphabet) for _ in range(RUN_LETTERS)) for _ in range(RUNS)
        )

    prose = (ROOT / "docs" / "budgets.md").read_text(encoding="utf-8")
    return {
        "random_lowercase": words(string.ascii_lowercase),
        "random_consonants": words("bcdfghjklmnpqrstvwxz"),
        "random_rare_letters": words("jkqvwxz"),
        "repeated_pair_qo": " ".join([("qo" * 6)[:RUN_LETTERS]] * RUNS),
        "repeated_pair_zq": " ".join([("zq" * 6)[:RUN_LETTERS]] * RUNS),
        "rot13_prose": codecs.encode(prose, "rot13"),
    }


def main() -> None:
    counters = tokenkit.counters()
    for name, text in texts().items():
        estimate = text_tokens(text)
        most, by = max((count(text), tokenizer) for tokenizer, count in counters.items())
        print(f"FIGURE {name}_most_over_estimate {most / estimate:.2f} x ({by})")
        print(f"FIGURE {name}_o200k_over_estimate {counters['o200k'](text) / estimate:.2f} x")
    gpt4o = ModelSettings.model_validate(
        {
            "vendor": "openai",
            "serve": [{"provider": "openai", "model_id": "gpt-4o"}],
            "context_window": 128_000,
            "input_usd_per_mtok": 2.5,
            "output_usd_per_mtok": 10.0,
        }
    )
    text = texts()["repeated_pair_zq"]
    messages = [Message(role="user", content=text)]
    worst = reservation_micros(
        estimate_tokens(messages, []), MAX_TOKENS, gpt4o, input_margin_pct=20
    )
    billed_tokens = counters["o200k"](text) + 3 + 3  # OpenAI's framing of one message
    billed = -(-(billed_tokens * 2_500_000 + MAX_TOKENS * 10_000_000) // 1_000_000)
    print(f"FIGURE zq_turn_billed_over_worst_case {billed / worst:.2f} x")


if __name__ == "__main__":
    main()
