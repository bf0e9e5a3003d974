"""Who may use the console: tokens, roles, sessions and their CSRF tokens.

Tokens come from `RELEVO_CONSOLE_TOKENS` or the file `[console] tokens_file` names (a
mounted secret), one "NAME ROLE TOKEN" a line (`;` separates lines in the variable).
A token must look random (`secrets.token_urlsafe(32)`): one that repeats itself, uses
few characters or is another line's token is refused at start, the error naming the
line, never the token. A token given at the login form is compared with every
configured one in constant time (`hmac.compare_digest`), all of them each time.

A session lives in this process only (a restart logs everyone out) and carries its own
CSRF token, which every action must send back. Each token holds at most
`sessions_per_token` sessions: its next login ends its own oldest one, never another
person's. (Not in Redis: the viewer's Redis user can write nothing, by design, and a
console is one process.)
"""

from __future__ import annotations

import hmac
import math
import re
import secrets
import time
import zlib
from collections import Counter
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from worker.errors import ConfigError
from worker.settings import environment

__all__ = ["TOKENS_ENV", "Principal", "Role", "Sessions", "Tokens", "csrf_ok", "load_tokens"]

TOKENS_ENV = "RELEVO_CONSOLE_TOKENS"
_NAME = re.compile(r"^[A-Za-z0-9_.@-]{1,64}$")
_TOKEN = re.compile(r"^[\x21-\x7e]{24,256}$")  # printable, no blanks: a pasted secret
# Estimated from the token's own characters: 24 random URL-safe ones carry ~100 bits.
_MIN_BITS = 96


class Role(StrEnum):
    """A viewer sees everything; an operator may also act."""

    VIEWER = "viewer"
    OPERATOR = "operator"


@dataclass(frozen=True)
class Principal:
    """Who is logged in: the audit trail's "who"."""

    name: str
    role: Role

    @property
    def may_act(self) -> bool:
        return self.role is Role.OPERATOR


@dataclass(frozen=True)
class Tokens:
    """The configured tokens, each for one named person or tool and one role."""

    entries: tuple[tuple[Principal, str], ...]

    def authenticate(self, given: str) -> Principal | None:
        """The principal whose token `given` is, comparing with every token in constant time."""
        found = None
        offered = given.encode("utf-8", "surrogateescape")
        for principal, token in self.entries:
            if hmac.compare_digest(offered, token.encode()):
                found = principal
        return found


_Line = tuple[Principal, str, str]  # who, the token, where it was read


def _parse(lines: list[str], where: str) -> list[_Line]:
    entries = []
    for number, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        # Never the token itself in a message: only where it is and what is wrong.
        if len(parts) != 3:
            raise ConfigError(f"{where}: line {number}: expected NAME ROLE TOKEN")
        name, role, token = parts
        if not _NAME.match(name):
            raise ConfigError(f"{where}: line {number}: name: 1-64 of A-Z a-z 0-9 _ . @ -")
        if role not in Role.__members__.values():
            raise ConfigError(f"{where}: line {number}: role must be viewer or operator")
        if not _TOKEN.match(token):
            raise ConfigError(
                f"{where}: line {number}: token must be 24-256 printable characters, no blanks"
            )
        if not random_enough(token):
            raise ConfigError(
                f"{where}: line {number}: token ({name}) is too easy to guess (repeated or "
                "few characters); make one with: python3 -c "
                "'import secrets; print(secrets.token_urlsafe(32))'"
            )
        entries.append((Principal(name, Role(role)), token, f"{where}: line {number}"))
    return entries


def random_enough(token: str) -> bool:
    """Whether `token` looks random: enough bits by its own letter frequencies, and no
    repetition a compressor finds ("abab…" has many letters and little entropy)."""
    counts = Counter(token)
    bits = -sum(n * math.log2(n / len(token)) for n in counts.values())
    data = token.encode()
    return bits >= _MIN_BITS and len(zlib.compress(data, 9)) >= 0.75 * len(data)


def load_tokens(tokens_file: Path | None) -> Tokens:
    """The tokens of `RELEVO_CONSOLE_TOKENS` and of `tokens_file`; at least one is needed."""
    entries: list[_Line] = []
    if from_env := (environment.value(TOKENS_ENV) or "").strip():
        entries += _parse(from_env.replace(";", "\n").splitlines(), TOKENS_ENV)
    if tokens_file is not None:
        try:
            text = tokens_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"console.tokens_file: cannot read {tokens_file}: {exc}") from None
        entries += _parse(text.splitlines(), f"console.tokens_file {tokens_file}")
    if not entries:
        raise ConfigError(
            f"no console tokens: set {TOKENS_ENV} or [console] tokens_file "
            '("NAME ROLE TOKEN" a line; ROLE viewer or operator)'
        )
    names = [p.name for p, _, _ in entries]
    if len(set(names)) != len(names):
        raise ConfigError("console tokens: a name appears twice")
    first: dict[str, str] = {}
    for _, token, line in entries:
        if token in first:
            raise ConfigError(f"console tokens: {line} repeats the token of {first[token]}")
        first[token] = line
    return Tokens(tuple((principal, token) for principal, token, _ in entries))


@dataclass
class _Session:
    principal: Principal
    csrf: str
    expires: float
    notice: str | None = None


@dataclass
class Sessions:
    """Logged-in sessions of this process, by an unguessable id kept in a cookie.

    At most `per_owner` live sessions per principal (one token each): a flood of logins
    with one token ends that token's own oldest sessions, and memory stays bounded by
    the number of tokens.
    """

    ttl_s: float
    per_owner: int = 20
    _live: dict[str, _Session] = field(default_factory=dict)

    def start(self, principal: Principal) -> str:
        now = time.monotonic()
        self._live = {k: s for k, s in self._live.items() if s.expires > now}
        own = [k for k, s in self._live.items() if s.principal == principal]
        for sid in own[: max(0, len(own) - self.per_owner + 1)]:  # oldest first: dict order
            del self._live[sid]
        sid = secrets.token_urlsafe(32)
        self._live[sid] = _Session(principal, secrets.token_urlsafe(32), now + self.ttl_s)
        return sid

    def get(self, sid: str | None) -> _Session | None:
        session = self._live.get(sid or "")
        if session is None or session.expires <= time.monotonic():
            return None
        return session

    def end(self, sid: str | None) -> None:
        self._live.pop(sid or "", None)


def csrf_ok(session: _Session, given: object) -> bool:
    """Whether the form sent back this session's CSRF token."""
    return isinstance(given, str) and hmac.compare_digest(given.encode(), session.csrf.encode())
