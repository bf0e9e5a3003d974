"""What looks like a secret, and removing it: from log lines, results and provider errors.

This module is the one definition; the adapters (provider error messages, httpx
errors) and the turn report use it as the logs do. `redact_text` removes:

- the exact secrets it is given (raw and URL-encoded), e.g. the configured providers' keys;
- anything shaped like a key: `sk-…` (masked ones too), `AIza…`, `Bearer …`;
- the value after a credential's name: `x-api-key: …`, `"api_key": "…"`, `?key=…`,
  `Authorization: Basic …`;
- the password of a URL: `redis://user:…@host` (`redact_url` does only that).

`Redactor` is the structlog processor: it walks each event, nested values included,
scrubs every string as above, and also replaces whole values: those of fields named
like credentials (`authorization`, `api_key`…) and whole prompts (`messages`,
`prompt`, `contents`).
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

from structlog.typing import EventDict, WrappedLogger

from worker.settings import Settings

__all__ = ["REDACTED", "Redactor", "provider_secrets", "redact_exact", "redact_text", "redact_url"]

REDACTED = "[redacted]"
OMITTED = "[omitted]"

# Key shapes, at a word's start ("task-list" is no key): OpenAI and Anthropic keys, also
# as providers echo them masked (`sk-abc***xyz`); Google keys and OAuth access tokens;
# any bearer token.
_PATTERNS = re.compile(
    r"\bsk-[a-z0-9_*\-]{4,}|\bAIza[0-9a-z_\-]{8,}|\bya29\.[0-9a-z_.\-]{8,}|\bbearer\s+\S+",
    re.IGNORECASE,
)
# Keep a credential's name, drop its value: "x-api-key: abc", '"api_key": "abc"', "?key=abc",
# "secret_key=abc", "authorization=Basic abc". Any name ending in "key" counts.
_NAMED = re.compile(
    r"(?i)((?:key|\bauthorization)[\"']?\s*[:=]\s*[\"']?)"
    r"(?:(?:basic|bearer)\s+)?[^\s\"'&,;}]+"
)
# A URL's password: "redis://user:pw@host", "rediss://:pw@host".
_URL_PASSWORD = re.compile(r"(?i)(\b[a-z][a-z0-9+.-]*://[^\s/@:]*:)[^\s/@]+@")
_CREDENTIAL_FIELDS = frozenset(
    {
        "api_key",
        "apikey",
        "authorization",
        "proxy_authorization",
        "x_api_key",
        "x_goog_api_key",
        "secret",
        "password",
        "token",
    }
)
_PROMPT_FIELDS = frozenset({"messages", "prompt", "contents", "system_prompt"})
_MAX_DEPTH = 8
_PLAIN = frozenset({bool, int, float})
# Every match of `_PATTERNS`, `_NAMED` or `_URL_PASSWORD` contains one of these (any case):
# most logged strings (ids, model names, statuses) pass with one search, not three rewrites.
_SUSPECT = re.compile(r"(?i)sk-|aiza|ya29\.|bearer|key|authorization|://")


def redact_text(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` without the given secrets nor anything shaped like a key or credential header."""
    return _scrub(text, _forms(secrets))


def redact_exact(text: str, secrets: Iterable[str]) -> str:
    """`text` without the given secrets, and nothing else changed: for a provider's error
    body before it is parsed, where a pattern could cut the JSON apart."""
    return _replace(text, _forms(secrets))


def _forms(secrets: Iterable[str]) -> tuple[str, ...]:
    """Each secret as written and URL-encoded, longest first (a key containing another
    is removed whole)."""
    forms = {form for s in secrets if s for form in (s, quote(s, safe=""))}
    return tuple(sorted(forms, key=len, reverse=True))


def _replace(text: str, forms: tuple[str, ...]) -> str:
    for form in forms:
        if form in text:
            text = text.replace(form, REDACTED)
    return text


def _scrub(text: str, forms: tuple[str, ...]) -> str:
    text = _replace(text, forms)
    if _SUSPECT.search(text) is None:
        return text
    text = _NAMED.sub(lambda m: m.group(1) + REDACTED, text)
    text = _URL_PASSWORD.sub(lambda m: m.group(1) + REDACTED + "@", text)
    return _PATTERNS.sub(REDACTED, text)


def redact_url(url: str) -> str:
    """`url` without its password (user, host and port kept), fit for a message."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}{port}"))


class Redactor:
    """A structlog processor that removes secrets and prompts from every event, at any depth."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._lock = threading.Lock()
        self._known: set[str] = set()
        self._secrets: tuple[str, ...] = ()
        self.add(secrets)

    def add(self, secrets: Iterable[str]) -> None:
        """Also remove these exact values from now on (blank values are ignored)."""
        with self._lock:
            self._known |= {s for s in secrets if s and s.strip()}
            # Encoded once here, not once per logged string.
            self._secrets = _forms(self._known)

    def __call__(self, logger: WrappedLogger, method: str, event: EventDict) -> EventDict:
        secrets = self._secrets
        out = {}
        # `_field` inlined for the top level: a turn's line has ~20 flat fields.
        for key, value in event.items():
            placeholder = _placeholder(key) if isinstance(key, str) else None
            if placeholder is not None and value is not None:
                out[key] = placeholder
            elif type(value) is str:
                out[key] = _scrub(value, secrets)
            elif value is None or type(value) in _PLAIN:
                out[key] = value
            else:
                out[key] = self._value(value, secrets, 0)
        return out

    def _field(self, key: object, value: Any, secrets: tuple[str, ...], depth: int) -> Any:
        if isinstance(key, str) and value is not None:
            placeholder = _placeholder(key)
            if placeholder is not None:
                return placeholder
        return self._value(value, secrets, depth)

    def _value(self, value: Any, secrets: tuple[str, ...], depth: int) -> Any:
        if value is None or isinstance(value, bool | int | float):
            return value
        if isinstance(value, str):
            return _scrub(value, secrets)
        if depth >= _MAX_DEPTH:
            return OMITTED
        if isinstance(value, Mapping):
            return {k: self._field(k, v, secrets, depth + 1) for k, v in value.items()}
        if isinstance(value, list | tuple | set | frozenset):
            return [self._value(v, secrets, depth + 1) for v in value]
        # Exceptions, models, anything else: rendered as text, then scrubbed like text.
        return _scrub(str(value), secrets)


@functools.lru_cache(maxsize=1024)
def _placeholder(key: str) -> str | None:
    """What replaces the value of a field named `key`, if its name says it is a secret
    or a prompt (the same few field names come back on every line)."""
    name = key.lower().replace("-", "_")
    if name in _CREDENTIAL_FIELDS or name.endswith("_api_key"):
        return REDACTED
    if name in _PROMPT_FIELDS:
        return OMITTED
    return None


def provider_secrets(settings: Settings) -> list[str]:
    """The API keys of every configured provider that has one where the config says, and
    the egress proxy's and the RabbitMQ broker's passwords."""
    keys = [provider.api_key() for provider in settings.providers.values()]
    urls = (settings.http.proxy_url, settings.broker.url)
    keys.extend(urlsplit(url).password for url in urls if url is not None)
    return [key for key in keys if key]
