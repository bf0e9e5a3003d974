"""relevo's exceptions.

Provider and httpx errors are translated once, in the adapters; nothing above
them sees an httpx exception. The class of a `ProviderError` decides what the
chain does next (see `worker.turn.policy.RULES`).

    RelevoError
    ├── ConfigError            a bad configuration, naming the key
    ├── InputError             a bad turn request, naming the field
    ├── DeadlineExceeded       the turn's deadline passed
    ├── ProviderError          one attempt failed
    │   ├── ServerError            500 / 502 / 504, Anthropic api_error
    │   ├── Overloaded             503 overloaded, Anthropic 529
    │   ├── FirstByteTimeout       nothing arrived before the first-byte timeout
    │   ├── ResponseTimeout        content began but the answer did not finish in time
    │   ├── ConnectionFailed       refused, reset or dropped before any content
    │   │   └── ResponseCutOff         dropped after the provider answered 200: it may bill it
    │   ├── MalformedResponse      a body or stream that cannot be understood
    │   ├── OutputInvalid          an answer that is not the JSON the turn's schema asks for
    │   ├── RateLimited            429 rate limit (maybe with Retry-After)
    │   ├── QuotaExhausted         quota, credit, billing or spend limit of the account
    │   │   └── ModelQuotaExhausted    a quota of one model on the account (Gemini's per-day)
    │   ├── AuthFailed             401 / 403
    │   ├── InvalidRequest         400 / 413 / 422: the request itself is bad
    │   ├── ModelNotFound          404: the model or deployment does not exist (any more)
    │   └── ContextTooLong         the prompt exceeds the model's window
    ├── TurnFailed             every attempt's error, as an ExceptionGroup
    └── (worker.fleet.errors)  sending a turn and reading it: FleetUnavailable,
                               TurnTimeout, StreamRestarted

    rediskit.StoreError        the shared store failed a call (`rediskit.store_errors`)
    ├── StoreForbidden         Redis refused this worker (password, ACL): fail closed
    └── StoreUnreachable       Redis slow or gone: the guard answers locally, keeps writes

`StoreForbidden` and `StoreUnreachable` are `rediskit`'s `StoreForbiddenError` and
`StoreUnavailableError` (and `breakers`'), under the names this package gives them.
"""

from __future__ import annotations

from typing import ClassVar

from rediskit import DOWN, REFUSED, StoreForbiddenError, StoreUnavailableError

__all__ = [
    "STORE_DOWN",
    "STORE_REFUSED",
    "AuthFailed",
    "ConfigError",
    "ConnectionFailed",
    "ContextTooLong",
    "DeadlineExceeded",
    "FirstByteTimeout",
    "InputError",
    "InvalidRequest",
    "MalformedResponse",
    "ModelNotFound",
    "ModelQuotaExhausted",
    "OutputInvalid",
    "Overloaded",
    "ProviderError",
    "QuotaExhausted",
    "RateLimited",
    "RelevoError",
    "ResponseCutOff",
    "ResponseTimeout",
    "ServerError",
    "StoreForbidden",
    "StoreUnreachable",
    "TurnFailed",
]


# The shared store's failures as every room of worker catches them: Redis slow, gone or
# refusing us, as redis-py and sockets raise it and as `rediskit.store_errors` translates it.
STORE_DOWN = DOWN
# The part of it that means "Redis answered and said no" (password, ACL): fail closed.
STORE_REFUSED = REFUSED
StoreForbidden = StoreForbiddenError
StoreUnreachable = StoreUnavailableError


class RelevoError(Exception):
    """Base class of every error relevo raises on purpose."""


class ConfigError(RelevoError):
    """The configuration cannot be used; the message names the key."""


class InputError(RelevoError):
    """A turn request cannot be run; the message names the field."""


class DeadlineExceeded(RelevoError):
    """The turn's deadline passed before a model answered."""

    code: ClassVar[str] = "deadline_exceeded"


class ProviderError(RelevoError):
    """One attempt at one model on one provider failed.

    `code` is the stable name used in reports, logs and metrics.
    """

    code: ClassVar[str] = "provider_error"

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        provider_code: str | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.provider_code = provider_code
        self.retry_after_s = retry_after_s

    def __str__(self) -> str:
        where = f"HTTP {self.status}" if self.status is not None else "no HTTP status"
        kind = f" {self.provider_code}" if self.provider_code else ""
        return f"{self.code} ({where}{kind}): {self.message}"


class ServerError(ProviderError):
    code = "server_error"


class Overloaded(ProviderError):
    code = "overloaded"


class FirstByteTimeout(ProviderError):
    code = "first_byte_timeout"


class ResponseTimeout(ProviderError):
    code = "response_timeout"


class ConnectionFailed(ProviderError):
    code = "connection_error"


class ResponseCutOff(ConnectionFailed):
    """The provider answered (a success status), then the body or stream broke: the call
    reached a model that may have written the answer, and bills it."""


class MalformedResponse(ProviderError):
    code = "malformed_response"


class OutputInvalid(ProviderError):
    """The answer is not the JSON the turn's `response_format` asks for (it was answered,
    and billed)."""

    code = "output_invalid"


class RateLimited(ProviderError):
    code = "rate_limited"


class QuotaExhausted(ProviderError):
    code = "quota_exhausted"


class ModelQuotaExhausted(QuotaExhausted):
    """A quota of this model on the account is spent until it resets (`retry_after_s`);
    the account's other models still have theirs."""


class AuthFailed(ProviderError):
    code = "auth_failed"


class InvalidRequest(ProviderError):
    code = "invalid_request"


class ModelNotFound(ProviderError):
    """The provider does not know this model: retired, misspelt, or a deleted deployment."""

    code = "model_not_found"


class ContextTooLong(ProviderError):
    code = "context_length_exceeded"


class TurnFailed(RelevoError, ExceptionGroup[Exception]):
    """No model answered; carries every attempt's error, in order."""
