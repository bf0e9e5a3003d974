"""Spend attribution: a charge's labels (a few key and value strings) and the spend by them.

A charge may carry labels, such as the agent and the user a turn was for. Every script
that adds to a tenant's spend adds the same micros to each label's value, in the same
period hashes and the same step (budgets/lua/lib.lua), so a key's values sum to the
period's spend. Each key keeps at most a bound of distinct values per period; the rest
are counted as `other`, and a charge without the key as `none`.

Labels reach Redis as one string: the bound, then each key and value, every part ended
by the unit separator (\\x1f), which neither a key nor a value may hold. The value of a
key the charge does not carry is empty.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from budgets.errors import InvalidNameError

__all__ = [
    "LABEL_KEY_PATTERN",
    "MAX_LABEL_KEYS",
    "MAX_LABEL_VALUE_CHARS",
    "Attribution",
    "attributions",
    "check_label_key",
    "encode_labels",
]

# The metadata keys of a turn (worker.types): no '=', '!', '#' or ':', which the fields
# "by:<key>=<value>", "by:<key>!other" and "by:<key>#" rest on.
LABEL_KEY_PATTERN = r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$"
MAX_LABEL_KEYS = 4
MAX_LABEL_VALUE_CHARS = 256
MAX_VALUES_PER_KEY = 10_000
_KEY = re.compile(LABEL_KEY_PATTERN)
# Printable: no control character (the separator among them).
_VALUE = re.compile(rf"[^\x00-\x1f\x7f]{{1,{MAX_LABEL_VALUE_CHARS}}}")
_SEP = "\x1f"


def check_label_key(key: object) -> str:
    """`key` if it may name a label (`LABEL_KEY_PATTERN`), else `InvalidNameError`."""
    if not isinstance(key, str) or _KEY.fullmatch(key) is None:
        raise InvalidNameError(
            f"label key {key!r} must be a letter or '_' followed by up to 63 letters, "
            "digits, '_', '.' or '-'"
        )
    return key


def encode_labels(keys: Sequence[str], values: Mapping[str, str], most_values: int) -> str:
    """The labels of a charge by `keys` (from `values`; a key it lacks is `none`), as the
    scripts take them; "" without keys. `most_values` is how many distinct values of a key
    a period keeps. A value that is not printable, or longer than MAX_LABEL_VALUE_CHARS,
    is refused (`InvalidNameError`)."""
    if not keys:
        return ""
    if not 1 <= most_values <= MAX_VALUES_PER_KEY:
        raise ValueError(f"most_values must be in [1, {MAX_VALUES_PER_KEY}] (got {most_values})")
    parts = [str(most_values)]
    for key in keys:
        value = values.get(key, "")
        if value and _VALUE.fullmatch(value) is None:
            raise InvalidNameError(
                f"label {key!r}: a value is 1 to {MAX_LABEL_VALUE_CHARS} printable characters"
            )
        parts += (key, value)
    return _SEP.join(parts) + _SEP


@dataclass(frozen=True, slots=True)
class Attribution:
    """A period's spend by the values of one key: `values` (largest first), `none_micros`
    (charges without the key), `other_micros` (values past the period's bound). Their
    sum is the spend the key saw; `spent_micros` is the period's whole spend, which is
    more when spend came before the key was attributed."""

    key: str
    spent_micros: int
    values: dict[str, int] = field(default_factory=dict)
    none_micros: int = 0
    other_micros: int = 0

    @property
    def attributed_micros(self) -> int:
        return sum(self.values.values()) + self.none_micros + self.other_micros

    @property
    def unattributed_micros(self) -> int:
        """Spend the key did not see (before it was attributed, or by an older release)."""
        return self.spent_micros - self.attributed_micros

    def rows(self) -> list[tuple[str, int]]:
        """The spend as people read it: each value, then "(no <key>)", "(other)" and
        "(unattributed)" where not zero; the rows sum to `spent_micros`."""
        rows = list(self.values.items())
        for label, micros in (
            (f"(no {self.key})", self.none_micros),
            ("(other)", self.other_micros),
            ("(unattributed)", self.unattributed_micros),
        ):
            if micros:
                rows.append((label, micros))
        return rows


def attributions(spend: Mapping[str, int]) -> dict[str, Attribution]:
    """Every key's `Attribution` from a period hash's fields (as integers)."""
    found: dict[str, dict[str, int]] = {}
    specials: dict[str, dict[str, int]] = {}
    for name, micros in spend.items():
        if not name.startswith("by:"):
            continue
        rest = name[3:]
        equals = rest.find("=")
        bang = rest.find("!")
        if equals > 0 and (bang < 0 or equals < bang):
            found.setdefault(rest[:equals], {})[rest[equals + 1 :]] = micros
        elif bang > 0:
            specials.setdefault(rest[:bang], {})[rest[bang + 1 :]] = micros
    spent = spend.get("spent", 0)
    return {
        key: Attribution(
            key,
            spent,
            dict(sorted(found.get(key, {}).items(), key=lambda kv: (-kv[1], kv[0]))),
            specials.get(key, {}).get("none", 0),
            specials.get(key, {}).get("other", 0),
        )
        for key in sorted({*found, *specials})
    }
