"""Named chains: a turn runs on the chain it names, and every chain shares one view of health.

Each turn runs over real HTTP against the simulated providers; the shared-health test keeps
its breakers in real Redis. The chains (models from tests.chainkit):

    default   openai/alpha, anthropic/beta        ([chain])
    planner   anthropic/beta, google/gamma
    triage    openai/alpha, google/gamma          (shares its primary with default)
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis
from structlog.testing import capture_logs

import budgets
from tests.chainkit import KEY, run, settings, turn, worker_config
from worker.errors import ConfigError, InputError
from worker.fleet.app import make_app
from worker.fleet.enqueue import enqueue_turn
from worker.guard.redis_guard import open_guard
from worker.guard.route_book import RouteBook
from worker.guard.testing import ScriptedGuard
from worker.settings import LimitsSettings, Settings, load_settings
from worker.simulator import Fault, Simulator
from worker.turn.intake import checked_turn
from worker.types import AttemptOutcome, Status, TurnRequest, TurnResult

pytestmark = pytest.mark.usefixtures("fresh_sim", "provider_key")


CHAINS = {
    "planner": {"models": ["anthropic/beta", "google/gamma"]},
    "triage": {"models": ["openai/alpha", "google/gamma"]},
}


def routed(sim: Simulator, **sections: Any) -> Settings:
    chain = ("openai/alpha", "anthropic/beta")
    return settings(sim.url, chain, chains=CHAINS, **sections)


# --- configuration ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("chains", "error"),
    [
        ({"default": {"models": ["openai/alpha", "anthropic/beta"]}}, "chains.default: the chain"),
        ({"p": {"models": ["openai/alpha", "openai/nope"]}}, "chains.p.models[1]: 'openai/nope'"),
        ({"p": {"models": ["openai/alpha"]}}, "chains.p.models: Tuple should have at least 2"),
        ({"bad name": {"models": ["openai/alpha", "anthropic/beta"]}}, "chains.bad name"),
        (
            {"Fast": {"models": ["openai/alpha", "anthropic/beta"]}},
            "chains.Fast: a chain's name is written in lowercase",
        ),
        (
            {"p": {"models": ["openai/alpha", "google/gamma"], "cheaper_model": "openai/alpha"}},
            "chains.p.cheaper_model: 'openai/alpha' is chain 'p''s primary",
        ),
    ],
    ids=["default", "unknown-model", "too-short", "bad-name", "uppercase", "cheaper-is-primary"],
)
def test_a_bad_chain_is_refused_at_load_with_one_line(
    sim: Simulator, chains: dict[str, Any], error: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        settings(sim.url, chains=chains)
    assert error in str(caught.value)
    assert "\n" not in str(caught.value)


def test_the_chains_a_turn_may_name() -> None:
    config = settings("http://127.0.0.1:9", chains=CHAINS)
    assert config.chain_names == ("default", "planner", "triage")
    assert config.chain_named(None) is config.chain_named("default") is config.chain
    assert config.chain_named("planner").models == ("anthropic/beta", "google/gamma")


# --- choosing -------------------------------------------------------------------------------


@pytest.mark.parametrize("release", ["0.1.0", "0.2.0"])
async def test_a_turn_runs_on_the_chain_it_names_and_says_which(
    sim: Simulator, release: str
) -> None:
    config = routed(sim, worker={"oldest_release": release})
    planned = await run(config, turn().model_copy(update={"chain": "planner"}))
    assert planned.status is Status.OK
    assert (planned.chain, planned.primary_model, planned.effective_model) == (
        "planner",
        "anthropic/beta",
        "anthropic/beta",
    )
    unnamed = await run(config, turn())
    assert unnamed.effective_model == "openai/alpha"
    # A result names `default` only once no relevo 0.1.0 reader is left (it reads strictly).
    assert unnamed.chain == (None if release == "0.1.0" else "default")
    assert sim.calls("beta") == 1
    assert sim.calls("alpha") == 1


async def test_a_worker_without_the_chain_ends_the_turn_failed_naming_its_chains(
    sim: Simulator,
) -> None:
    result = await run(routed(sim), turn().model_copy(update={"chain": "premium"}))
    assert (result.status, result.reason) == (Status.FAILED, "unknown_chain")
    assert result.error is not None
    assert "'premium'" in result.error
    assert "default, planner, triage" in result.error
    assert sim.calls("alpha") == sim.calls("beta") == sim.calls("gamma") == 0


async def test_each_chain_falls_back_within_itself(sim: Simulator) -> None:
    sim.set_faults("beta", Fault(status=503))
    result = await run(routed(sim), turn().model_copy(update={"chain": "planner"}))
    assert result.status is Status.OK
    assert result.effective_model == "google/gamma"
    assert [a.model for a in result.attempts] == ["anthropic/beta", "google/gamma"]


async def test_a_chains_own_cheaper_model_stands_in_for_its_turns(
    sim: Simulator, redis_url: str, namespace: str
) -> None:
    chains = {"planner": {**CHAINS["planner"], "cheaper_model": "openai/alpha-mini"}}
    config = settings(
        sim.url,
        ("openai/alpha", "anthropic/beta"),
        chains=chains,
        degradation={"action": "cheaper_model", "cheaper_model": "google/gamma"},
        redis={"url": redis_url, "namespace": namespace},
        budgets={"unknown_tenants": "reject"},
    )
    guard = open_guard(config)
    try:
        planned = await run(config, turn().model_copy(update={"chain": "planner"}), guard=guard)
        unnamed = await run(config, turn(), guard=guard)
    finally:
        await guard.aclose()
    # An unknown tenant is refused its reservations: the stand-in is tried, and refused too.
    assert [a.model for a in planned.attempts] == ["anthropic/beta", "openai/alpha-mini"]
    assert [a.model for a in unnamed.attempts] == ["openai/alpha", "google/gamma"]
    assert planned.degradation == unnamed.degradation == "message"


# --- metadata -------------------------------------------------------------------------------


async def test_metadata_goes_to_the_result_and_every_log_line_of_the_turn(sim: Simulator) -> None:
    sim.set_faults("alpha", Fault(status=503))
    pairs = {"agent": "triage", "user": "u-42"}
    with capture_logs() as events:
        result = await run(routed(sim), turn().model_copy(update={"metadata": pairs}))
    assert result.metadata == pairs
    lines = [e for e in events if e["event"] in ("turn.attempt", "turn.completed")]
    assert {e["event"] for e in lines} == {"turn.attempt", "turn.completed"}
    assert all(e["metadata"] == pairs for e in lines)
    plain = await run(routed(sim), turn())
    assert "metadata" not in plain.model_dump()  # none: not written (relevo 0.1.0 reads it)


@pytest.mark.parametrize(
    ("metadata", "error"),
    [
        ({f"k{i}": "v" for i in range(17)}, "metadata: Dictionary should have at most 16 items"),
        ({"a b": "v"}, "metadata.a b.[key]: String should match pattern"),
        ({"user": "x\ny"}, "metadata.user: String should match pattern"),
        ({"user": "x" * 257}, "metadata.user: String should have at most 256 characters"),
        ({"user": "a\u202eb"}, "metadata.user: String should match pattern"),
        ({"user": "a\u2028b"}, "metadata.user: String should match pattern"),
        ({"user": "a\x85b"}, "metadata.user: String should match pattern"),
        ({"user": "a\u200bb"}, "metadata.user: String should match pattern"),
    ],
    ids=[
        "too-many",
        "bad-key",
        "control-character",
        "too-long",
        "bidi-override",
        "line-separator",
        "c1-control",
        "zero-width",
    ],
)
def test_metadata_past_its_bounds_is_refused_naming_the_bound(
    metadata: dict[str, str], error: str
) -> None:
    payload = {**turn().model_dump(mode="json"), "metadata": metadata}
    with pytest.raises(InputError) as caught:
        checked_turn(payload, LimitsSettings())
    assert error in str(caught.value)


# --- one view of health ---------------------------------------------------------------------


async def test_a_breaker_opened_by_one_chains_turns_is_skipped_by_anothers(
    sim: Simulator, redis_url: str, namespace: str
) -> None:
    """alpha is default's primary and triage's: once default's traffic opens its breaker in
    Redis, triage's next turn skips it without a call."""
    sim.set_faults("alpha", Fault(status=503))
    config = routed(
        sim,
        redis={"url": redis_url, "namespace": namespace},
        breakers={"consecutive_failures_threshold": 2},
        retry={"retries_per_model": 0, "base_delay_s": 0.01},
    )
    guard = open_guard(config)
    try:
        for _ in range(2):
            assert (await run(config, turn(), guard=guard)).effective_model == "anthropic/beta"
        calls = sim.calls("alpha")
        triaged = await run(config, turn().model_copy(update={"chain": "triage"}), guard=guard)
    finally:
        await guard.aclose()
    assert sim.calls("alpha") == calls == 2
    assert triaged.effective_model == "google/gamma"
    first = triaged.attempts[0]
    assert (first.model, first.outcome, first.error_class) == (
        "openai/alpha",
        AttemptOutcome.SKIPPED,
        "breaker_open",
    )


# --- where a turn enters --------------------------------------------------------------------


def _app(config: Settings, redis_url: str, namespace: str, release: str) -> Any:
    fleet = config.model_copy(
        update={
            "redis": config.redis.model_copy(update={"url": redis_url, "namespace": namespace}),
            "worker": config.worker.model_copy(
                update={"queue": namespace, "oldest_release": release}
            ),
        }
    )
    return make_app(fleet)


def test_enqueue_refuses_a_chain_the_fleet_has_not_and_a_named_one_for_0_1_0_workers(
    sim: Simulator, redis_url: str, namespace: str
) -> None:
    config = routed(sim)
    app = _app(config, redis_url, namespace, "0.2.0")
    with pytest.raises(InputError, match=r"chain: no chain named 'premium' \(chains: default, "):
        enqueue_turn(turn().model_copy(update={"chain": "premium"}), app=app)
    old = _app(config, redis_url, namespace, "0.1.0")
    with pytest.raises(InputError, match=re.escape('oldest_release = "0.2.0"')):
        enqueue_turn(turn().model_copy(update={"chain": "planner"}), app=old)
    with pytest.raises(InputError, match=r"^metadata: cannot be sent while relevo 0\.1\.0"):
        enqueue_turn(turn().model_copy(update={"metadata": {"agent": "a"}}), app=old)


def test_relevo_turn_runs_the_chain_it_is_given_and_refuses_an_unknown_one(
    sim: Simulator, tmp_path: Path
) -> None:
    config = tmp_path / "chain.toml"
    config.write_text(_toml(sim.url))
    request = tmp_path / "turn.json"
    request.write_text('{"tenant_id": "acme", "messages": [{"role": "user", "content": "Hi"}]}')
    base = [sys.executable, "-m", "worker.cli", "turn", "--config", str(config)]
    env = {"RELEVO_TEST_KEY": KEY, "PATH": "/usr/bin:/bin"}
    ran = subprocess.run(
        [*base, "--input", str(request), "--chain", "planner"],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert ran.returncode == 0, ran.stderr
    assert '"effective_model": "anthropic/beta"' in ran.stdout
    refused = subprocess.run(
        [*base, "--input", str(request), "--chain", "premium"],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert refused.returncode == 2
    assert "no chain named 'premium' (chains: default, planner)" in refused.stderr


def _toml(url: str) -> str:
    return f"""
[chain]
models = ["openai/alpha", "anthropic/beta"]

[chains.planner]
models = ["anthropic/beta", "openai/alpha"]

[providers.oa]
kind = "openai"
base_url = "{url}/v1"
api_key_env = "RELEVO_TEST_KEY"

[providers.an]
kind = "anthropic"
base_url = "{url}"
api_key_env = "RELEVO_TEST_KEY"

[models."openai/alpha"]
vendor = "openai"
context_window = 100000
input_usd_per_mtok = 1
output_usd_per_mtok = 2
serve = [{{provider = "oa", model_id = "alpha"}}]

[models."anthropic/beta"]
vendor = "anthropic"
context_window = 100000
input_usd_per_mtok = 1
output_usd_per_mtok = 2
serve = [{{provider = "an", model_id = "beta"}}]
"""


# --- tenants' routes ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("default", "allowed", "error"),
    [
        ("premium", ("default", "triage"), "default chain 'premium' is not one of the allowed"),
        (None, ("triage", "triage"), "a chain is named twice"),
        (None, (), "allowed chains: 1 to 100 names"),
        ("a,b", None, "chain 'a,b': letters, digits"),
    ],
)
def test_a_route_that_cannot_hold_is_refused(
    default: str | None, allowed: tuple[str, ...] | None, error: str
) -> None:
    with pytest.raises(budgets.InvalidNameError, match=re.escape(error)):
        budgets.Route(default, allowed)


def test_a_route_reads_back_as_it_was_written() -> None:
    for route in (
        budgets.Route(),
        budgets.Route("planner"),
        budgets.Route(None, ("default",)),
        budgets.Route("triage", ("default", "triage")),
    ):
        assert budgets.Route.unpacked(route.packed()) == route


def _config_file(path: Path, sim: Simulator, redis_url: str, namespace: str) -> Path:
    """tests.chainkit's worker (openai/alpha, then anthropic/beta) with two chains more."""
    chains = """
[chains.planner]
models = ["anthropic/beta", "openai/alpha"]

[chains.triage]
models = ["openai/alpha", "anthropic/beta"]
"""
    path.write_text(worker_config(sim=sim.url, redis_url=redis_url, namespace=namespace) + chains)
    return path


def test_a_tenants_route_gives_its_default_chain_and_refuses_the_others(
    sim: Simulator, redis_url: str, namespace: str, tmp_path: Path
) -> None:
    config = _config_file(tmp_path / "chain.toml", sim, redis_url, namespace)
    relevo = [sys.executable, "-m", "worker.cli", "tenants", "chains", "--config", str(config)]
    env = {**os.environ, "RELEVO_TEST_KEY": KEY}
    given = subprocess.run(
        [*relevo, "acme", "--default", "planner", "--allow", "default,planner"],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert given.returncode == 0, given.stderr
    assert given.stdout == "acme: default chain planner; may use default, planner\n"
    unknown = subprocess.run(
        [*relevo, "acme", "--allow", "premium"],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert unknown.returncode == 2
    assert "no chain named 'premium' (chains: default, planner, triage)" in unknown.stderr
    unnamed, named, refused, elsewhere = asyncio.run(_four_turns(load_settings(config)))
    assert (unnamed.chain, unnamed.effective_model) == ("planner", "anthropic/beta")
    assert (named.chain, named.effective_model) == ("default", "openai/alpha")
    assert (refused.status, refused.reason) == (Status.FAILED, "chain_not_allowed")
    assert refused.error == (
        "chain: tenant 'acme' may not use chain 'triage' (its chains: default, planner)"
    )
    assert refused.attempts == ()
    assert (elsewhere.status, elsewhere.chain) == (Status.OK, "triage")
    shown = subprocess.run(
        [*relevo, "acme", "--clear"], check=False, capture_output=True, text=True, env=env
    )
    assert shown.stdout.startswith("acme: no route of its own")


async def _four_turns(config: Settings) -> list[TurnResult]:
    """acme's turns naming no chain, `default` and `triage`; another tenant's on `triage`."""
    guard = open_guard(config)
    other = turn().model_copy(update={"tenant_id": "other", "chain": "triage"})
    try:
        return [
            await run(config, request, guard=guard)
            for request in (
                turn(),
                turn().model_copy(update={"chain": "default"}),
                turn().model_copy(update={"chain": "triage"}),
                other,
            )
        ]
    finally:
        await guard.aclose()


async def test_a_route_last_read_stands_while_redis_does_not_answer() -> None:
    class Down:
        async def hget(self, *_: object) -> None:
            raise ConnectionError("refused")

    book = RouteBook(budgets.Routes(Down(), namespace="ns"), timeout_s=0.1, fresh_s=0)  # type: ignore[arg-type]
    book._seen["acme"] = (0.0, budgets.Route("planner"))
    assert await book.get("acme") == budgets.Route("planner")
    assert await book.get("never-read") is None


async def test_a_held_turn_is_kept_as_sent_and_meets_its_tenants_route_when_replayed(
    sim: Simulator,
) -> None:
    """The kill switch holds the turn without the tenant's default written into it: the
    route that holds when it is replayed decides (it may have changed)."""
    guard = ScriptedGuard(kill_switch="drill", routes={"acme": budgets.Route("triage")})
    result = await run(routed(sim), turn(), guard=guard)
    assert result.status is Status.REJECTED
    [held] = guard.held
    assert "chain" not in json.loads(held)
    guard.kill_switch = None
    guard.routes["acme"] = budgets.Route("planner")
    replayed = await run(routed(sim), TurnRequest.model_validate_json(held), guard=guard)
    assert (replayed.chain, replayed.effective_model) == ("planner", "anthropic/beta")


async def test_a_route_relevo_did_not_write_leaves_the_tenant_the_default_chain_only(
    redis_url: str, namespace: str
) -> None:
    client = Redis.from_url(redis_url)
    routes = budgets.Routes(client, namespace=namespace)
    try:
        for damaged in ("garbage", "default|default,,premium", "x|y|z", b"\xff|"):
            await client.hset(routes.key, "rt", damaged)
            book = RouteBook(routes, timeout_s=1.0)
            with capture_logs() as events:
                assert await book.get("rt") == budgets.Route(None, ("default",)), damaged
            assert [e["event"] for e in events] == ["route.unreadable"]
    finally:
        await client.delete(routes.key)
        await client.aclose()


def test_a_field_name_that_would_break_the_line_is_shown_as_a_literal() -> None:
    forged = 'a\n{"event": "turn.completed"}\nrelevo: all good'
    payload = {**turn().model_dump(mode="json"), "metadata": {forged: "v"}}
    with pytest.raises(InputError) as caught:
        checked_turn(payload, LimitsSettings())
    assert "\n" not in str(caught.value)
    assert str(caught.value).startswith('metadata.\'a\\n{"event"')
