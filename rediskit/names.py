"""Keys and the names inside them: one hash tag per namespace, one rule per kind of name.

Every key of a namespace starts with its Redis Cluster hash tag (`hash_tag`), or a shard's
tag (one tenant's budget keys), and every key a Lua script touches arrives in KEYS with
one tag: each script runs on one slot, so the state can be sharded on Cluster.
`check_name` checks a name against the `NameRule` of its kind, one message format.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["NAMESPACE", "NameRule", "check_name", "hash_tag"]


def hash_tag(namespace: str, shard: str | None = None) -> str:
    """The first segment of every key under `namespace` (checked with `NAMESPACE`).

    With `shard` (e.g. a tenant id), the tag of that part of the namespace's state: its
    keys share a slot of their own, so on a Redis Cluster the shards spread over the
    nodes. The "/" between them is outside `NAMESPACE`: no namespace's tag equals a shard's.
    """
    if shard is None:
        return "{" + namespace + "}"
    return "{" + namespace + "/" + shard + "}"


@dataclass(frozen=True)
class NameRule:
    """What one kind of name may hold: `chars` and `first` are regex class bodies."""

    chars: str
    first: str
    max_chars: int
    says: str  # `chars` for people
    first_says: str  # `first` for people
    dots: bool = True  # whether ".." may appear
    _valid: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_valid", re.compile(f"[{self.first}][{self.chars}]*"))

    def valid(self, value: str) -> bool:
        """Whether `value` follows the rule (in C: every key of every turn is checked)."""
        return (
            len(value) <= self.max_chars
            and self._valid.fullmatch(value) is not None
            and (self.dots or ".." not in value)
        )

    def broken(self, value: str) -> str:
        """What `value` must do and does not, completing "<what> <value> must ..."."""
        if not value:
            return "not be empty"
        if len(value) > self.max_chars:
            return f"be at most {self.max_chars} characters, not {len(value)}"
        usage = f"start with {self.first_says} and use only {self.says}"
        for index, char in enumerate(value):
            if not re.fullmatch(f"[{self.chars}]", char):
                kind = "character" if char.isascii() else "non-ASCII character"
                return f"{usage} (found the {kind} {char!r} at position {index})"
        if not re.fullmatch(f"[{self.first}]", value[0]):
            return f"{usage} (it starts with {value[0]!r})"
        return "not contain '..'"


# One namespace, one hash tag, for both packages: what each of them accepted before.
NAMESPACE = NameRule(
    chars="A-Za-z0-9_.:-",
    first="A-Za-z0-9",
    max_chars=64,
    says="ASCII letters, digits, '_', '.', ':' and '-'",
    first_says="a letter or digit",
    dots=False,
)
_SHOWN_CHARS = 40


def check_name(value: object, what: str, rule: NameRule, error: type[Exception]) -> str:
    """`value` if it follows `rule`, else `error("<what> <value> must ...")` saying why."""
    if not isinstance(value, str):
        raise error(f"{what} must be a string, not {type(value).__name__}")
    if rule.valid(value):
        return value
    shown = value if len(value) <= _SHOWN_CHARS else value[:_SHOWN_CHARS] + "…"
    raise error(f"{what} {shown!r} must {rule.broken(value)}")
