"""The fleet-wide breakers, cooldowns and exhausted marks: one EVALSHA per operation."""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from breakers.keys import Keys, exhausted_member, pair_member, validate_name
from breakers.killswitch import stored_state
from breakers.outcomes import Cooldown, Entry, Exhausted, Gone, Outcome, Pair, Verdict
from breakers.policy import CooldownPolicy, Policy
from breakers.scripts import SCRIPTS
from breakers.state import (
    BreakerState,
    FleetState,
    ScopeState,
    Transition,
    TransitionKind,
)
from rediskit import Parse, raise_if_error, read_clock, store_errors, text

__all__ = ["FleetBreakers"]

T = TypeVar("T")

_VERDICT_CODES = {Verdict.SUCCESS: "s", Verdict.FAILURE: "f", Verdict.NEUTRAL: "n"}
_PINNED_MS = -1
# A process checks and records the same few scopes on every turn: their keys and
# arguments are built once (a fifth of the guard's CPU when built per turn). Bounded all the same.
_MAX_LAYOUTS = 256
_Account = str | Pair  # an account, or one model's quota on it
_CheckLayout = tuple[list[str], list[Pair], list[_Account], list[str], list[str | int]]


class FleetBreakers:
    """Breakers shared by every process through one Redis (or one private fakeredis).

    `scopes` names the configured scopes, so operators may act on one before any call.
    `policies` overrides `policy` per scope; every process must use the same ones.
    `clock_ms` replaces the Redis server's clock in the scripts, for tests only (see
    `breakers.testing.ManualClock`).
    """

    def __init__(
        self,
        redis: Redis,
        *,
        namespace: str = "relevo",
        policy: Policy | None = None,
        policies: Mapping[str, Policy] | None = None,
        cooldowns: CooldownPolicy | None = None,
        scopes: Iterable[str] = (),
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        self.redis = redis
        self.clock_ms = clock_ms
        self.keys = Keys(namespace)
        self.policy = policy or Policy()
        self.policies: Mapping[str, Policy] = dict(policies or {})
        self.cooldowns = cooldowns or CooldownPolicy()
        self.known_scopes = frozenset(validate_name(s, "scope") for s in (*scopes, *self.policies))
        self._outcomes: dict[Outcome, tuple[list[str], list[str | int]]] = {}
        self._checks: dict[
            tuple[tuple[str, ...], tuple[Pair, ...], tuple[_Account, ...]], _CheckLayout
        ] = {}
        every = (self.policy, *self.policies.values())
        self.index_ttl_ms = round(
            1000
            * max(
                *(p.state_ttl_s for p in every),
                self.cooldowns.max_cooldown_s,
                self.cooldowns.exhausted_ttl_s,
                self.cooldowns.gone_s,
            )
        )

    def with_redis(self, redis: Redis) -> FleetBreakers:
        """The same configuration over another client (e.g. the local in-memory one)."""
        return FleetBreakers(
            redis,
            namespace=self.keys.namespace,
            policy=self.policy,
            policies=self.policies,
            cooldowns=self.cooldowns,
            scopes=self.known_scopes,
            clock_ms=self.clock_ms,
        )

    def policy_for(self, scope: str) -> Policy:
        """The policy of one scope."""
        return self.policies.get(scope, self.policy)

    async def load_scripts(self) -> None:
        """Load the Lua scripts into Redis (done on demand; call it to fail fast at start)."""
        await SCRIPTS.load(self.redis)

    def queue_script(
        self, pipe: Pipeline, name: str, keys: list[str], args: list[str | int]
    ) -> None:
        """Queue one EVALSHA of breaker script `name` on `pipe`, on this store's clock."""
        SCRIPTS.queue(pipe, name, keys, args, read_clock(self.clock_ms))

    async def run_script(self, queue: Callable[[Pipeline], Parse[T]]) -> T:
        """Run what `queue` queues in one round trip of its own (see `LuaScripts.run`)."""
        return await SCRIPTS.run(self.redis, queue)

    def check_on(
        self,
        pipe: Pipeline,
        scopes: Iterable[str],
        pairs: Iterable[Pair | tuple[str, str]] = (),
        accounts: Iterable[_Account] = (),
    ) -> Parse[FleetState]:
        """Queue the pre-turn check: kill switch, each scope, each pair's cooldown, each mark
        (of an account, or of a `Pair`: one model's quota on an account)."""
        asked = (tuple(scopes), tuple(Pair(*p) for p in pairs), tuple(accounts))
        layout = self._checks.get(asked)
        if layout is None:
            layout = self._check_layout(*asked)
            if len(self._checks) >= _MAX_LAYOUTS:
                self._checks.clear()
            self._checks[asked] = layout
        names, wanted_pairs, wanted_accounts, keys, args = layout
        self.queue_script(pipe, "check", keys, args)

        async def parse(reply: object) -> FleetState:
            row: list[Any] = raise_if_error(reply)
            kill = stored_state(row[0], row[1], row[2]) if row[0] else None
            states = {}
            for i, scope in enumerate(names):
                state, left, free = text(row[3 + 3 * i]), int(row[4 + 3 * i]), row[5 + 3 * i]
                retry_in_s = float("inf") if left == _PINNED_MS else left / 1000
                states[scope] = ScopeState(scope, BreakerState(state), bool(free), retry_in_s)
            rest = row[3 + 3 * len(names) : -2]
            return FleetState(
                epoch=text(row[-2]),
                epoch_off_by=text(row[-1]),
                kill_switch=kill,
                scopes=states,
                cooldowns={p: int(ms) / 1000 for p, ms in zip(wanted_pairs, rest, strict=False)},
                exhausted={
                    a: int(ms) > 0
                    for a, ms in zip(wanted_accounts, rest[len(wanted_pairs) :], strict=True)
                },
            )

        return parse

    def _check_layout(
        self, scopes: tuple[str, ...], pairs: tuple[Pair, ...], accounts: tuple[_Account, ...]
    ) -> _CheckLayout:
        names = list(dict.fromkeys(scopes))
        wanted_pairs = list(dict.fromkeys(pairs))
        wanted_accounts = list(dict.fromkeys(accounts))
        keys = [self.keys.kill]
        for scope in names:
            keys += [self.keys.breaker(scope), self.keys.probe(scope)]
        keys += [self.keys.cooldown_index, self.keys.exhausted_index, self.keys.epoch]
        args: list[str | int] = [len(names), len(wanted_pairs), len(wanted_accounts)]
        args += [self.policy_for(scope).probes for scope in names]
        args += [pair_member(p.account, p.model) for p in wanted_pairs]
        args += [
            exhausted_member(*a) if isinstance(a, Pair) else exhausted_member(a)
            for a in wanted_accounts
        ]
        return names, wanted_pairs, wanted_accounts, keys, args

    async def note_reset(self, epoch: str, lost: Sequence[str]) -> None:
        """Note in the store's epoch `epoch` when it was found to have lost its data, and
        what kinds of state went with it (`reset`): what the console tells operators."""
        async with store_errors("note the store's reset"):
            if text(await self.redis.hget(self.keys.epoch, "id") or b"") == epoch:
                await self.redis.hset(
                    self.keys.epoch,
                    mapping={"reset_ms": int(time.time() * 1000), "lost": "; ".join(lost)},
                )

    async def reset(self) -> tuple[int, str] | None:
        """When the store was last found to have lost its data, and what went with it."""
        async with store_errors("read the store's epoch"):
            at, lost = await self.redis.hmget(self.keys.epoch, ["reset_ms", "lost"])
        if at is None:
            return None
        try:
            return int(text(at)), text(lost or b"")
        except (ValueError, UnicodeDecodeError):
            return None

    async def start_epoch(self) -> str:
        """The store's epoch id, made now if it has none (a new store, or one that lost
        its data). Concurrent callers all get the one id that won."""

        def queue(pipe: Pipeline) -> Parse[str]:
            # On the server's clock, whatever this store's: restores compare with it.
            SCRIPTS.queue(pipe, "epoch", [self.keys.epoch], [uuid.uuid4().hex])

            async def parse(reply: object) -> str:
                return text(raise_if_error(reply))

            return parse

        return await self.run_script(queue)

    async def check(
        self,
        scopes: Iterable[str],
        pairs: Iterable[Pair | tuple[str, str]] = (),
        accounts: Iterable[_Account] = (),
    ) -> FleetState:
        """The pre-turn check in one round trip (see `check_on`)."""
        return await self.run_script(lambda pipe: self.check_on(pipe, scopes, pairs, accounts))

    def acquire_probe_on(self, pipe: Pipeline, scope: str, holder: str) -> Parse[bool]:
        """Queue a probe-slot request; the reply says whether `holder` may call `scope` now.

        True when the breaker is closed (no slot needed) or `holder` holds a half-open
        probe slot; False when open or every slot is taken.
        """
        validate_name(holder, "holder")
        policy = self.policy_for(scope)
        keys = [self.keys.breaker(scope), self.keys.probe(scope)]
        ttl_ms = max(1, round(policy.probe_ttl_s * 1000))
        self.queue_script(pipe, "acquire", keys, [holder, ttl_ms, policy.probes])

        async def parse(reply: object) -> bool:
            return int(raise_if_error(reply)) > 0

        return parse

    async def acquire_probe(self, scope: str, holder: str) -> bool:
        """Whether `holder` may call `scope` now, taking a probe slot if half-open."""
        return await self.run_script(lambda pipe: self.acquire_probe_on(pipe, scope, holder))

    def record_on(self, pipe: Pipeline, entries: Sequence[Entry]) -> Parse[list[Transition]]:
        """Queue a batch of outcomes, cooldowns and exhausted marks, applied atomically."""
        outcomes = [e for e in entries if isinstance(e, Outcome)]
        cools: list[tuple[str, str, int]] = [
            (e.account, e.model, self.cooldowns.cooldown_ms(e.seconds))
            for e in entries
            if isinstance(e, Cooldown)
        ]
        # A gone pair is a cooldown past the cap: the same key, skipped the same way; the
        # gone index tells operators which ones to clear when the model is back.
        gone = [
            (e.account, e.model, self.cooldowns.gone_ms()) for e in entries if isinstance(e, Gone)
        ]
        cools += gone
        marks = [e for e in entries if isinstance(e, Exhausted)]
        keys = [self.keys.scope_index, self.keys.cooldown_index, self.keys.exhausted_index]
        args: list[str | int] = [
            len(outcomes),
            len(cools),
            len(marks),
            random.randrange(1_000_000),
            self.index_ttl_ms,
        ]
        for o in outcomes:
            part = self._outcomes.get(o)
            if part is None:
                part = self._outcome_part(o)
                if len(self._outcomes) >= _MAX_LAYOUTS:
                    self._outcomes.clear()
                self._outcomes[o] = part
            keys += part[0]
            args += part[1]
        for account, model, ms in cools:
            keys.append(self.keys.cooldown(account, model))
            args += [pair_member(account, model), ms]
        for m in marks:
            keys.append(self.keys.exhausted(m.account, m.model))
            args += [exhausted_member(m.account, m.model), self.cooldowns.exhausted_ms(m.seconds)]
        keys.append(self.keys.gone_index)
        args.append(len(gone))
        self.queue_script(pipe, "record", keys, args)

        async def parse(reply: object) -> list[Transition]:
            row: list[Any] = raise_if_error(reply)
            out = []
            for i, o in enumerate(outcomes):
                kind, break_ms = text(row[2 * i]), int(row[2 * i + 1])
                if kind:
                    seconds = break_ms / 1000 if break_ms else None
                    out.append(Transition(o.scope, TransitionKind(kind), seconds))
            return out

        return parse

    def _outcome_part(self, o: Outcome) -> tuple[list[str], list[str | int]]:
        keys = [self.keys.breaker(o.scope), self.keys.window(o.scope), self.keys.probe(o.scope)]
        args: list[str | int] = [o.scope, _VERDICT_CODES[o.verdict], o.holder or ""]
        return keys, args + self.policy_for(o.scope).lua_args()

    async def record(self, entries: Sequence[Entry]) -> list[Transition]:
        """Apply outcomes, cooldowns and marks in one round trip; return the transitions made.

        A transition is returned to exactly one caller in the fleet.
        """
        return await self.run_script(lambda pipe: self.record_on(pipe, entries))
