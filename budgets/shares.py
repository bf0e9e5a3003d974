"""A tenant's share of the fleet's time: concurrency, rate limits and weight.

Budgets bound what a tenant spends; a share bounds how much of the fleet it takes at once.
Both are per-tenant settings an operator sets (`relevo tenants set`), so they live here,
beside the spend limits; the dispatcher that enforces them (`worker.fleet.fairqueue`) reads
them in its Lua step. Knows nothing of Celery: tenants, integers and one Redis hash.

    {N}:budget:shares   hash   tenant -> "max_in_flight|turns_per_minute|     no TTL
                               input_tokens_per_minute|weight"             (operators')

The hash lives beside the dispatch queue (the broker's Redis, `[redis] url`), not with the
spend (`shared_url`): the dispatch step reads it in the same script that moves a turn.
An empty field is no limit.
"""

from __future__ import annotations

from dataclasses import dataclass

from redis.asyncio import Redis

from budgets.errors import InvalidAmountError
from budgets.keys import check_namespace, check_tenant
from rediskit import hash_tag, text

__all__ = ["MAX_WEIGHT", "Share", "Shares"]

MAX_WEIGHT = 1000
# Past these, a limit is no limit; the bound keeps Lua's doubles exact.
_MAX_LIMIT = 10**12


@dataclass(frozen=True, slots=True)
class Share:
    """A tenant's limits (None: unlimited) and its weight when the fleet is saturated."""

    max_in_flight: int | None = None
    turns_per_minute: int | None = None
    input_tokens_per_minute: int | None = None
    weight: int = 1

    def __post_init__(self) -> None:
        for name in ("max_in_flight", "turns_per_minute", "input_tokens_per_minute"):
            value = getattr(self, name)
            if value is not None and not _whole(value, _MAX_LIMIT):
                raise InvalidAmountError(f"{name}: a whole number from 1 to {_MAX_LIMIT}")
        if not _whole(self.weight, MAX_WEIGHT):
            raise InvalidAmountError(f"weight: a whole number from 1 to {MAX_WEIGHT}")

    def packed(self) -> str:
        """The form the dispatch script reads."""
        fields = (self.max_in_flight, self.turns_per_minute, self.input_tokens_per_minute)
        return "|".join("" if v is None else str(v) for v in fields) + f"|{self.weight}"

    @classmethod
    def unpacked(cls, raw: str) -> Share:
        """The share `packed` wrote; `InvalidAmountError` for anything else (the dispatch
        script reads it as strictly: a share it cannot read is not one)."""
        parts = raw.split("|")
        if len(parts) != 4:
            raise InvalidAmountError("share: not four fields")
        if not all(p == "" or (p.isascii() and p.isdigit() and len(p) <= 13) for p in parts):
            raise InvalidAmountError("share: a field is not a whole number")
        limits = [int(p) if p else None for p in parts[:3]]
        return cls(limits[0], limits[1], limits[2], int(parts[3] or 1))


def _whole(value: object, most: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= most


class Shares:
    """The tenants' shares as operators set them, on the dispatch queue's Redis."""

    def __init__(self, redis: Redis, *, namespace: str = "relevo") -> None:
        self.redis = redis
        self.key = f"{hash_tag(check_namespace(namespace))}:budget:shares"

    async def set(self, tenant: str, share: Share) -> None:
        await self.redis.hset(self.key, check_tenant(tenant), share.packed())

    async def clear(self, tenant: str) -> bool:
        """Back to the defaults; False if the tenant had no share of its own."""
        return bool(await self.redis.hdel(self.key, check_tenant(tenant)))

    async def all(self) -> dict[str, Share]:
        """Every tenant with a share of its own that can be read."""
        raw = await self.redis.hgetall(self.key)
        out = {}
        for t, v in raw.items():
            try:
                out[text(t)] = Share.unpacked(text(v))
            except (InvalidAmountError, UnicodeDecodeError):
                continue
        return out
