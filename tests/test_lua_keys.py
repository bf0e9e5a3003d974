"""Every Lua script's header names its KEYS in order; the Python that calls it passes them so.

Each script is run once on the real Redis through the code that calls it (not by hand),
and every EVALSHA / EVAL those calls send is recorded as `LuaScripts` builds it. A call
is then held to the script's header: as many keys as the header names (at least its
fixed ones, when the number depends on ARGV), and each key at the place the header
gives its role.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis as redis_sync
from redis.asyncio import Redis

import breakers
import budgets
from breakers.scripts import SCRIPTS as BREAKER_SCRIPTS
from budgets.migrate import migrate_keys
from budgets.scripts import SCRIPTS as BUDGET_SCRIPTS
from rediskit import LuaScripts
from worker.fleet.fairqueue import SCRIPTS as FAIR_SCRIPTS
from worker.fleet.fairqueue import FairQueue, enqueue_sync
from worker.fleet.turnstore import TURN_SCRIPTS, TurnStore
from worker.types import Status, TurnResult

MIGRATE_SCRIPTS = LuaScripts("budgets", "lua/migrate", library=False)
SETS = (BREAKER_SCRIPTS, BUDGET_SCRIPTS, MIGRATE_SCRIPTS, FAIR_SCRIPTS, TURN_SCRIPTS)


@dataclass(frozen=True)
class Sent:
    scripts: str  # "<package>/<folder>"
    name: str
    keys: tuple[str, ...]


def _where(scripts: LuaScripts) -> str:
    return f"{scripts.package}/{scripts.folder}"


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[Sent]:
    """Every script call `LuaScripts` builds while the test runs (sent as built)."""
    calls: list[Sent] = []
    build = LuaScripts._args

    def spy(self: LuaScripts, name: str, keys: list[str], args: list[Any], now: Any) -> Any:
        calls.append(Sent(_where(self), name, tuple(keys)))
        return build(self, name, keys, args, now)

    monkeypatch.setattr(LuaScripts, "_args", spy)
    return calls


@pytest.fixture
async def redis(redis_url: str, namespace: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_url)
    yield client
    for pattern in (f"{{{namespace}}}*", f"{{{namespace}/*", f"{namespace}:*"):
        keys = [k async for k in client.scan_iter(match=pattern, count=1000)]
        if keys:
            await client.delete(*keys)
    await client.aclose()


async def _every_script(redis: Redis, redis_url: str, ns: str) -> None:
    """Run each script once, through the code that calls it."""
    store = breakers.FleetBreakers(redis, namespace=ns, scopes=["openai"])
    epoch = await store.start_epoch()
    await store.check(["openai"], [("acct", "gpt")], ["acct"])
    await store.acquire_probe("openai", "holder-1")
    await store.record(
        [breakers.Outcome("openai", breakers.Verdict.FAILURE), breakers.Gone("acct", "gpt")]
    )
    operators = breakers.Operators(store)
    await operators.report()
    await operators.force_open("openai", 60)
    await operators.clear_gone("acct", "gpt", who="ops")
    switch = breakers.KillSwitch(redis, namespace=ns)
    seen = await switch.on("ops", "drill")
    await switch.off("ops")
    await switch.restore(seen, epoch, within_s=60)
    await breakers.HeldTurns(redis, namespace=ns).take()
    hedges = breakers.HedgeStore(redis, namespace=ns)
    async with redis.pipeline(transaction=False) as pipe:
        hedges.observe_on(pipe, "acct", "gpt", 120.0, hedge=False)
        await pipe.execute()
    await hedges.take()

    ledger = budgets.Ledger(redis, namespace=ns)
    await ledger.set_limits("acme", 1_000_000, 10_000_000)
    await ledger.reserve("acme", "c1", provider="openai", micros=10, fallback=False, ttl_s=60)
    await ledger.settle("acme", "c1", 5)
    await ledger.reserve("acme", "c2", provider="openai", micros=10, fallback=False, ttl_s=60)
    await ledger.release("acme", "c2")
    await ledger.report("acme")
    await redis.hset(f"{{{ns}}}:budget:t:acme:limits", mapping={"daily": 1, "monthly": 2})
    await redis.hset(f"{{{ns}}}:budget:t:acme:day:2026-03-14", mapping={"spent": 1})
    await migrate_keys(redis, ns)

    fair = FairQueue(redis, namespace=ns, queue=f"{ns}:q")
    with redis_sync.Redis.from_url(redis_url) as client:
        enqueue_sync(
            client, ns, tenant="acme", turn_id="t1", deadline_ms=60_000, input_tokens=5,
            message="{}",
        )  # fmt: skip
    await fair.dispatch(most=1, depth=10)
    await fair.lease("acme", "t1", hold_s=60)
    await fair.renew([("acme", "t1")], hold_s=60)
    await fair.release("acme", "t1")

    turns = TurnStore(redis, namespace=ns, ttl_s=60)
    await turns.start_stream("t1", "holder-1")
    result = TurnResult(turn_id="t1", tenant_id="acme", status=Status.REJECTED, primary_model="gpt")
    await turns.replace(result, end_stream=True)
    await turns.replace(result)


# -- The headers ------------------------------------------------------------------------

_DECLARED = re.compile(r"KEYS\[([^\]]+)\]")
_DECLARING = re.compile(r"\s*KEYS\[")  # a library's line that declares, not one that mentions
_INDEX = re.compile(r"\s*(\d+)\s*(?:\.\.\s*(\d+)\s*)?")


@dataclass(frozen=True)
class Header:
    """What a script's header says of its KEYS: the places it names and what each holds."""

    roles: dict[int, str]  # place -> its description ("" when a list names several)
    variable: bool  # some places depend on ARGV (KEYS[2 .. 1+2S])

    @property
    def fixed(self) -> int:
        return max(self.roles, default=0)


def _comments(text: str, *, leading: bool) -> list[str]:
    """The comment lines of `text`: its leading block, or every one (a library's)."""
    lines = []
    for line in text.splitlines():
        if line.startswith("--"):
            lines.append(line[2:])
        elif leading and line.strip():
            break
    return lines


def header(scripts: LuaScripts, name: str) -> Header:
    lines = _comments(scripts.header(name), leading=True)
    if scripts.clocked:  # the library's KEYS come first, as its header says
        declared = [ln for ln in _comments(scripts.lib, leading=False) if _DECLARING.match(ln)]
        lines = declared + lines
    roles: dict[int, str] = {}
    variable = False
    for line in lines:
        found = list(_DECLARED.finditer(line))
        listed: list[int] = []  # "KEYS[1], KEYS[2], KEYS[3]  a, b, c": one role each
        for i, match in enumerate(found):
            end = found[i + 1].start() if i + 1 < len(found) else len(line)
            role = re.split(r"ARGV\[", line[match.end() : end])[0].strip(" ,")
            index = _INDEX.fullmatch(match.group(1))
            if index is None:
                variable = True
                continue
            first, last = int(index.group(1)), int(index.group(2) or index.group(1))
            if first == last and not role:
                listed.append(first)
                continue
            parts = role.split(",")
            if listed and len(parts) == len(listed) + 1:
                for place, part in zip([*listed, first], parts, strict=True):
                    roles.setdefault(place, part.strip())
                listed = []
                continue
            for place in range(first, last + 1):
                roles.setdefault(place, role if first == last else "")
    return Header(roles, variable)


# -- What each key is called in the headers ------------------------------------------------

# Per set of scripts, in order: a key (its hash tag taken off) fully matching the pattern
# holds the role named; the role's description in the header must contain that name.
ROLES: dict[str, list[tuple[str, str]]] = {
    "breakers/lua": [
        ("epoch", "epoch"),
        ("kill", "kill switch"),
        ("br:.*", "breaker"),
        ("win:.*", "window"),
        ("probe:.*", "probe"),
        ("idx:cool", "cooldown index"),
        ("idx:exh", "exhausted index"),
        ("idx:scopes", "scope index"),
        ("idx:gone", "gone index"),
        ("cool:.*", "cooldown"),
        ("held", "held-turns stream"),
        ("fb:.*", "latency histogram"),
        ("hedge:budget", "hedge budget"),
    ],
    "budgets/lua": [
        ("budget:held", "held hash"),
        ("budget:holds", "holds zset"),
        ("budget:reclaimed", "reclaimed hash"),
        ("budget:(day|month):.*", "day and month"),
        ("budget:limits", "limits hash"),
        ("budget:charge:.*", "charge hash"),
    ],
    "budgets/lua/migrate": [
        ("budget:t:.*", "old key"),
        ("budget:migrating:.*", "the claim"),
        ("budget:migrating", "claims in progress"),
        ("budget:migrated", "claims already applied"),
        ("budget:.*", "new key"),
    ],
    "worker.fleet/lua": [
        ("fair:(\\w+)", "\\1"),
        ("budget:shares", "shares hash"),
        ("turns:sent", "sent zset"),
        (".*:q", "broker's queue"),
    ],
    "worker.fleet/lua/turns": [
        ("turn:.*:result", "result"),
        ("turn:.*:chunks", "stream"),
    ],
}


def role_of(where: str, key: str, namespace: str) -> str:
    """The name the headers of `where`'s scripts give the role of `key`."""
    bare = re.sub(r"^\{[^}]*\}:", "", key.replace(namespace, "N"))
    for pattern, role in ROLES[where]:
        match = re.fullmatch(pattern, bare)
        if match:
            return match.expand(role)
    raise AssertionError(f"no role in ROLES[{where!r}] for the key {bare!r}")


def mismatches(call: Sent, namespace: str) -> list[str]:
    """How `call` breaks its script's header: the number of keys, or a key out of place."""
    scripts = next(x for x in SETS if _where(x) == call.scripts)
    said = header(scripts, call.name)
    least = said.fixed - sum(1 for r in said.roles.values() if "(optional)" in r)
    if said.variable:
        least, most = said.fixed, None
    else:
        most = said.fixed
    wrong = []
    if len(call.keys) < least or (most is not None and len(call.keys) > most):
        wrong.append(f"{call.name}: {len(call.keys)} keys, the header names {said.fixed}")
    for place, key in enumerate(call.keys, start=1):
        described = said.roles.get(place, "")
        role = role_of(call.scripts, key, namespace)
        if described and role not in described:
            wrong.append(f"{call.name}: KEYS[{place}] is a {role!r}, the header says {described!r}")
    return wrong


@pytest.fixture
async def every_call(redis: Redis, redis_url: str, namespace: str, sent: list[Sent]) -> list[Sent]:
    await _every_script(redis, redis_url, namespace)
    return list(sent)


async def test_the_exercise_runs_every_script(every_call: list[Sent]) -> None:
    run = {(call.scripts, call.name) for call in every_call}
    assert {(_where(x), name) for x in SETS for name in x.bodies} - run == set()


async def test_every_call_passes_the_keys_its_header_names_in_order(
    every_call: list[Sent], namespace: str
) -> None:
    assert [w for call in every_call for w in mismatches(call, namespace)] == []


async def test_every_script_names_its_keys(every_call: list[Sent]) -> None:
    for scripts in SETS:
        for name in scripts.bodies:
            said = header(scripts, name)
            assert said.roles, f"{_where(scripts)}/{name}.lua names no KEYS"


async def test_a_key_out_of_place_or_missing_is_found(
    every_call: list[Sent], namespace: str
) -> None:
    enqueue = next(c for c in every_call if c.name == "enqueue")
    wake, seq = enqueue.keys[9], enqueue.keys[8]
    swapped = Sent(enqueue.scripts, "enqueue", (*enqueue.keys[:8], wake, seq, *enqueue.keys[10:]))
    assert len(mismatches(swapped, namespace)) == 2
    short = Sent(enqueue.scripts, "enqueue", enqueue.keys[:-1])
    assert mismatches(short, namespace) == ["enqueue: 10 keys, the header names 11"]
