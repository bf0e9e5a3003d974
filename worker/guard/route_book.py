"""The tenants' routes (`budgets.Routes`) as this process read them lately.

A turn asks for its tenant's route before it walks: one read of Redis per tenant every
`fresh_s` at most, not one per turn. A route an operator changes holds within that long.
While Redis does not answer, the route last read stands; a tenant never read has none
(its turns run on the chain they name, or `default`). A route that cannot be read (not
written by relevo) is the narrowest: the chain named default, no other.
"""

from __future__ import annotations

import asyncio
import time

import structlog

import budgets
from budgets.routes import NARROWEST
from rediskit import STORE_ERRORS

__all__ = ["RouteBook"]

log = structlog.get_logger("relevo.guard")
# Tenants remembered at most; past it, the book starts over (each tenant is read again).
_MOST_TENANTS = 10_000


class RouteBook:
    """Tenants' routes, each read again once it is `fresh_s` old."""

    def __init__(self, routes: budgets.Routes, *, timeout_s: float, fresh_s: float = 5.0) -> None:
        self.routes = routes
        self.timeout_s = timeout_s
        self.fresh_s = fresh_s
        self._seen: dict[str, tuple[float, budgets.Route | None]] = {}

    async def get(self, tenant: str) -> budgets.Route | None:
        now = time.monotonic()
        seen = self._seen.get(tenant)
        if seen is not None and now - seen[0] < self.fresh_s:
            return seen[1]
        try:
            async with asyncio.timeout(self.timeout_s):
                route = await self.routes.get(tenant)
        except STORE_ERRORS as exc:
            log.warning("route.unread", tenant_id=tenant, error=type(exc).__name__)
            return None if seen is None else seen[1]
        except budgets.InvalidNameError as exc:
            # Something else wrote it: the tenant gets the narrowest route, not any chain.
            log.warning("route.unreadable", tenant_id=tenant, why=str(exc))
            route = NARROWEST
        if len(self._seen) >= _MOST_TENANTS:
            self._seen.clear()
        self._seen[tenant] = (now, route)
        return route
