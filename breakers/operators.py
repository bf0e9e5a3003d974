"""What an operator sees and does: the fleet's breakers, cooldowns and marks; open/close/reset,
and clearing a gone mark."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import structlog
from redis.asyncio.client import Pipeline

from breakers.errors import InvalidNameError, UnknownScopeError
from breakers.keys import pair_member, split_pair, validate_name
from breakers.outcomes import Pair
from breakers.state import BreakerState
from breakers.store import FleetBreakers
from rediskit import Parse, raise_if_error, store_errors, text

__all__ = ["CooldownReport", "ExhaustedReport", "FleetReport", "Operators", "ScopeReport"]

log = structlog.get_logger("relevo.breakers")


@dataclass(frozen=True)
class ScopeReport:
    """One breaker as an operator sees it."""

    scope: str
    state: BreakerState
    calls_in_window: int
    failures_in_window: int
    opened_at_ms: int | None
    retry_in_s: float  # open: break left (inf while pinned open); else 0
    probe_holders: tuple[str, ...]
    # The window that opened it (a failed probe's 1/1 on a reopen); 0, 0 when closed or
    # opened by an operator. An open breaker's own window is empty.
    opened_calls: int = 0
    opened_failures: int = 0

    @property
    def opened_by_operator(self) -> bool:
        """Open (or half-open) with no window behind it: an operator opened it."""
        return self.state is not BreakerState.CLOSED and not self.opened_calls

    @property
    def window_shown(self) -> tuple[int, int]:
        """(failures, calls) to show: the window that opened it while it is not closed,
        else the live window."""
        if self.state is not BreakerState.CLOSED and self.opened_calls:
            return self.opened_failures, self.opened_calls
        return self.failures_in_window, self.calls_in_window

    @property
    def failure_rate(self) -> float | None:
        """Failures / calls of `window_shown` (None with no calls)."""
        failures, calls = self.window_shown
        return failures / calls if calls else None


@dataclass(frozen=True)
class CooldownReport:
    """A skipped pair and how long it is still skipped: a rate limit's cooldown, or a gone
    mark (`gone`: the provider did not know the model; an operator may clear it)."""

    pair: Pair
    remaining_s: float
    gone: bool = False


@dataclass(frozen=True)
class ExhaustedReport:
    """An account marked exhausted and how long the mark still lasts."""

    account: str
    remaining_s: float


@dataclass(frozen=True)
class FleetReport:
    """Everything `relevo breakers` shows, read at one Redis server time."""

    now_ms: int
    scopes: list[ScopeReport]
    cooldowns: list[CooldownReport]
    exhausted: list[ExhaustedReport]


def _readable_scopes(members: list[Any]) -> list[str]:
    """The index's members that are scope names; any other (a hand edit, another tool) is
    left out and logged, so that one cannot stop every listing."""
    found = []
    for member in members:
        try:
            found.append(validate_name(text(member), "scope"))
        except (UnicodeDecodeError, InvalidNameError):
            shown = (
                member.decode("utf-8", "backslashreplace") if isinstance(member, bytes) else member
            )
            log.warning("breakers.scope_unreadable", member=str(shown)[:80], key="idx:scopes")
    return found


class Operators:
    """Operator commands on the fleet store. Redis errors raise `StoreUnavailableError`."""

    def __init__(self, store: FleetBreakers) -> None:
        self._store = store
        self._keys = store.keys

    async def scopes(self) -> list[str]:
        """Every known scope: configured ones and those the fleet recorded, sorted."""
        async with store_errors("list scopes"):
            seen = await self._store.redis.zrange(self._keys.scope_index, 0, -1)
        return sorted(self._store.known_scopes | set(_readable_scopes(seen)))

    async def report(self) -> FleetReport:
        """States, window counts, probe holders, cooldowns and exhausted marks."""
        names = await self.scopes()
        keys = [self._keys.cooldown_index, self._keys.exhausted_index]
        for s in names:
            keys += [self._keys.breaker(s), self._keys.window(s), self._keys.probe(s)]
        keys.append(self._keys.gone_index)
        args: list[str | int] = [
            max(1, round(self._store.policy_for(s).window_s * 1000)) for s in names
        ]

        def queue(pipe: Pipeline) -> Parse[FleetReport]:
            self._store.queue_script(pipe, "inspect", keys, args)
            return self._parse_report(names)

        async with store_errors("breakers report"):
            return await self._store.run_script(queue)

    def _parse_report(self, names: list[str]) -> Parse[FleetReport]:
        async def parse(reply: object) -> FleetReport:
            now, cools, marks, rows, gone = raise_if_error(reply)
            now = int(now)
            gone_pairs = {text(m) for m, _ in _pairs(gone)}
            scopes = []
            for i, scope in enumerate(names):
                row = rows[8 * i : 8 * i + 8]
                state, left, opened, calls, fails, holders, by_calls, by_fails = row
                scopes.append(
                    ScopeReport(
                        scope=scope,
                        state=BreakerState(text(state)),
                        calls_in_window=int(calls),
                        failures_in_window=int(fails),
                        opened_at_ms=int(opened) or None,
                        retry_in_s=float("inf") if int(left) < 0 else int(left) / 1000,
                        probe_holders=tuple(h for h in text(holders).split(",") if h),
                        opened_calls=int(by_calls),
                        opened_failures=int(by_fails),
                    )
                )
            return FleetReport(
                now_ms=now,
                scopes=scopes,
                cooldowns=[
                    CooldownReport(
                        Pair(*split_pair(text(m))), (int(end) - now) / 1000, text(m) in gone_pairs
                    )
                    for m, end in _pairs(cools)
                ],
                exhausted=[
                    ExhaustedReport(text(a), (int(end) - now) / 1000) for a, end in _pairs(marks)
                ],
            )

        return parse

    async def force_open(self, scope: str, seconds: float | None = None) -> BreakerState:
        """Open `scope` now: for `seconds` then half-open, or pinned open until closed (None)."""
        ms = 0 if seconds is None else max(1, round(seconds * 1000))
        return await self._force(scope, "open", ms)

    async def force_close(self, scope: str) -> BreakerState:
        """Close `scope` now, freeing probe slots and clearing its failure streak."""
        return await self._force(scope, "close", 0)

    async def reset(self, scope: str) -> BreakerState:
        """Forget everything about `scope`: state, window, streak, probe slots, break growth."""
        return await self._force(scope, "reset", 0)

    async def clear_gone(self, account: str, model: str, *, who: str) -> CooldownReport | None:
        """End the gone mark of (`account`, `model`) now: the fleet calls the model again.

        Returns the mark found: cleared if `gone`, else a rate limit's cooldown, left in
        place (it ends by itself); None when the pair is not skipped. Logged with `who`.
        """
        member = pair_member(account, model)
        keys = [
            self._keys.cooldown(account, model),
            self._keys.cooldown_index,
            self._keys.gone_index,
        ]
        cap_ms = round(self._store.cooldowns.max_cooldown_s * 1000)

        def queue(pipe: Pipeline) -> Parse[tuple[str, int]]:
            self._store.queue_script(pipe, "clear_gone", keys, [member, cap_ms])

            async def parse(reply: object) -> tuple[str, int]:
                kind, left_ms = raise_if_error(reply)
                return text(kind), int(left_ms)

            return parse

        async with store_errors(f"breakers clear-gone {member}"):
            kind, left_ms = await self._store.run_script(queue)
        if not kind:
            return None
        found = CooldownReport(Pair(account, model), left_ms / 1000, gone=kind == "gone")
        if found.gone:
            log.warning(
                "breakers.gone_cleared",
                who=who,
                account=account,
                model=model,
                left_s=found.remaining_s,
            )
        return found

    async def _force(self, scope: str, op: str, ms: int) -> BreakerState:
        validate_name(scope, "scope")
        known = await self.scopes()
        if scope not in known:
            raise UnknownScopeError(scope, known)
        policy = self._store.policy_for(scope)
        keys = [
            self._keys.breaker(scope),
            self._keys.window(scope),
            self._keys.probe(scope),
            self._keys.scope_index,
        ]
        ttl_ms = round(policy.state_ttl_s * 1000) + ms
        args: list[str | int] = [op, ms, ttl_ms, scope, self._store.index_ttl_ms]

        def queue(pipe: Pipeline) -> Parse[BreakerState]:
            self._store.queue_script(pipe, "force", keys, args)

            async def parse(reply: object) -> BreakerState:
                return BreakerState(text(raise_if_error(reply)))

            return parse

        async with store_errors(f"breakers {op} {scope}"):
            return await self._store.run_script(queue)


def _pairs(flat: list[Any]) -> list[tuple[Any, Any]]:
    return list(zip(flat[::2], flat[1::2], strict=True))
