"""Which chains a tenant's turns run on: its default chain, and the chains it may use.

A plan that may not use the premium chain is a tenant's route: turns that name no chain
run on its default, and a turn naming a chain outside its allowed ones is refused. Like
a share (`budgets.shares`), it is a per-tenant setting an operator sets (`relevo tenants
chains`), kept in one hash beside the spend limits:

    {N}:budget:routes   hash   tenant -> "default|allowed,allowed"   no TTL (operators')

An empty part is none: no default (the chain named `default`), or no limit (any chain).
Chain names are names to this package, nothing more: the worker knows which exist.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from redis.asyncio import Redis

from budgets.errors import InvalidNameError
from budgets.keys import check_namespace, check_tenant
from rediskit import hash_tag, text

__all__ = ["NARROWEST", "Route", "Routes"]

# A chain's name as the worker's settings spell it (`[chains.NAME]`).
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
_MOST_ALLOWED = 100


@dataclass(frozen=True, slots=True)
class Route:
    """A tenant's default chain (None: `default`) and the chains it may use (None: any)."""

    default: str | None = None
    allowed: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        names = [self.default] if self.default is not None else []
        names += list(self.allowed or ())
        for name in names:
            if not _NAME.fullmatch(name):
                raise InvalidNameError(f"chain {name!r}: letters, digits, _ . - (64 at most)")
        if self.allowed is not None:
            if not self.allowed or len(self.allowed) > _MOST_ALLOWED:
                raise InvalidNameError(f"allowed chains: 1 to {_MOST_ALLOWED} names")
            if len(set(self.allowed)) != len(self.allowed):
                raise InvalidNameError("allowed chains: a chain is named twice")
            if self.default is not None and self.default not in self.allowed:
                raise InvalidNameError(
                    f"default chain {self.default!r} is not one of the allowed chains"
                )

    def allows(self, chain: str) -> bool:
        """Whether a turn of this tenant may run on `chain`."""
        return self.allowed is None or chain in self.allowed

    def packed(self) -> str:
        return f"{self.default or ''}|{','.join(self.allowed or ())}"

    @classmethod
    def unpacked(cls, raw: str) -> Route:
        """The route `packed` wrote; `InvalidNameError` for anything else."""
        default, bar, allowed = raw.partition("|")
        if not bar:
            raise InvalidNameError("route: not two fields")
        return cls(default or None, tuple(allowed.split(",")) if allowed else None)


NARROWEST = Route(None, ("default",))
"""What a tenant whose route cannot be read may use: the chain named default, no other."""


class Routes:
    """The tenants' routes as operators set them, on the store's Redis."""

    def __init__(self, redis: Redis, *, namespace: str = "relevo") -> None:
        self.redis = redis
        self.key = f"{hash_tag(check_namespace(namespace))}:budget:routes"

    async def get(self, tenant: str) -> Route | None:
        """The tenant's route; None for none, `InvalidNameError` for one that cannot be
        read (written by something else than relevo)."""
        raw = await self.redis.hget(self.key, check_tenant(tenant))
        if raw is None:
            return None
        try:
            return Route.unpacked(text(raw))
        except UnicodeDecodeError:
            raise InvalidNameError("route: not UTF-8") from None

    async def set(self, tenant: str, route: Route) -> None:
        await self.redis.hset(self.key, check_tenant(tenant), route.packed())

    async def clear(self, tenant: str) -> bool:
        """No route of its own; False if it had none."""
        return bool(await self.redis.hdel(self.key, check_tenant(tenant)))

    async def all(self) -> dict[str, Route]:
        """Every tenant with a route that can be read."""
        out = {}
        for tenant, raw in (await self.redis.hgetall(self.key)).items():
            try:
                out[text(tenant)] = Route.unpacked(text(raw))
            except (InvalidNameError, UnicodeDecodeError):
                continue
        return out
