"""`relevo tenants apply` and `export`: many tenants' limits, shares and routes from one file,
on the real Redis (one namespace per test, forgotten afterwards)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

import budgets
from budgets.tenantfile import TenantSettings, TenantsFileError, parse_tenants
from tests.chainkit import worker_config
from tests.tenantskit import forget_namespace
from tests.test_operate import ns, on_redis, out_json, relevo
from worker.fleet.audit import AuditEntry, AuditTrail
from worker.fleet.fairqueue import FairKeys

__all__ = ["ns"]

_FIELDS = {
    "daily": '"$5.00"',
    "monthly": '"$100.00"',
    "max_in_flight": "4",
    "weight": "2",
    "default_chain": '"default"',
    "allowed_chains": '["default", "triage"]',
}


@pytest.fixture
def space(ns: str, redis_url: str) -> Iterator[str]:
    """The test's namespace, its keys deleted after the test."""
    yield ns
    asyncio.run(forget_namespace(redis_url, ns))


def _table(tenant: str, fields: dict[str, str]) -> str:
    return f'[tenants."{tenant}"]\n' + "".join(f"{k} = {v}\n" for k, v in fields.items())


def _many(count: int) -> str:
    """`count` tenants with ids in every form platforms write, and every kind of setting."""
    forms = ("org:{i}", "team/{i}", "user{i}@example.com", "acme.eu-{i}", "plan+{i}")
    tables = []
    for i in range(count):
        fields = dict(_FIELDS, daily=f'"{1 + i % 7}.{i % 100:02d}"')
        if i % 3 == 0:
            fields["fallback_cap"] = '"0.50"'
        if i % 4 == 0:
            del fields["allowed_chains"]
        if i % 5 == 0:
            del fields["max_in_flight"], fields["weight"]
        tables.append(_table(forms[i % len(forms)].format(i=i), fields))
    return "\n".join(tables)


def _keys(url: str, namespace: str) -> list[bytes]:
    with redis.Redis.from_url(url) as client:
        return [k for p in (f"*{{{namespace}}}*", f"*{{{namespace}/*") for k in client.keys(p)]


def _audit(url: str, namespace: str) -> list[AuditEntry]:
    async def work(client: Any) -> list[AuditEntry]:
        return await AuditTrail(client, namespace=namespace).latest(100)

    return on_redis(url, work)


def test_a_thousand_tenants_apply_export_and_apply_again_as_a_no_op(
    space: str, redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "tenants.toml"
    source.write_text(_many(1000))
    started = time.perf_counter()
    assert relevo("tenants", "apply", str(source), "--who", "ops", "--json") == 0
    applied_s = time.perf_counter() - started
    summary = out_json(capsys)
    assert (summary["added"], summary["changed"], summary["unchanged"]) == (1000, 0, 0)
    started = time.perf_counter()
    assert relevo("tenants", "export") == 0
    exported_s = time.perf_counter() - started
    exported = capsys.readouterr().out
    assert parse_tenants(exported) == parse_tenants(source.read_text())
    again = tmp_path / "exported.toml"
    again.write_text(exported)
    started = time.perf_counter()
    assert relevo("tenants", "apply", str(again), "--json") == 0
    noop_s = time.perf_counter() - started
    assert out_json(capsys) == {
        "dry_run": False,
        "added": 0,
        "changed": 0,
        "pruned": 0,
        "unchanged": 1000,
        "tenants": [],
    }
    # Seconds, not a round trip per field: a generous bound for a shared machine.
    assert max(applied_s, exported_s, noop_s) < 20
    # What workers read is what the file says.
    with redis.Redis.from_url(redis_url) as client:
        routes = client.hgetall(f"{{{space}}}:budget:routes")
        shares = client.hgetall(f"{{{space}}}:budget:shares")
    assert routes[b"org:0"] == b"default|"
    assert routes[b"team/1"] == b"default|default,triage"
    assert shares[b"team/1"] == b"4|||2"
    assert b"org:0" not in shares
    assert relevo("budgets", "show", "org:0", "--json") == 0
    limits = out_json(capsys)["limits"]
    assert limits == {
        "daily_micros": 1_000_000,
        "monthly_micros": 100_000_000,
        "fallback_cap_micros": 500_000,
        "overdraft_micros": 0,
    }
    # One audit action for the apply that changed things; none for the one that did not.
    entries = _audit(redis_url, space)
    assert [(e.action, e.who, e.target) for e in entries] == [
        ("tenants.apply", "ops", "tenants.toml")
    ] * 2
    assert entries[1].outcome == "requested"
    assert entries[0].outcome.startswith(
        "1000 added, 0 changed, 0 unchanged, 0 pruned: acme.eu-103, acme.eu-108,"
    )
    assert entries[0].outcome.endswith("(+990 more)")
    with capsys.disabled():
        print(
            f"\n1,000 tenants: apply {applied_s:.2f} s, export {exported_s:.2f} s, "
            f"apply again {noop_s:.2f} s"
        )


def test_a_dry_run_prints_the_change_and_writes_nothing(
    space: str, redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert relevo("budgets", "set", "org:1", "--daily", "1", "--monthly", "10") == 0
    before = sorted(_keys(redis_url, space))
    source = tmp_path / "t.toml"
    source.write_text(
        _table("org:1", {"daily": '"2"', "monthly": "10"}) + _table("new", {"weight": "3"})
    )
    capsys.readouterr()
    assert relevo("tenants", "apply", str(source), "--dry-run", "--prune") == 0
    assert capsys.readouterr().out.splitlines() == [
        f"Would apply {source}: 1 added, 1 changed, 0 unchanged, 0 pruned",
        "  + new: weight 3",
        "  ~ org:1: daily $1.00 -> $2.00",
    ]
    assert sorted(_keys(redis_url, space)) == before
    assert [e.action for e in _audit(redis_url, space)] == ["budgets.set"] * 2


def test_prune_clears_only_the_tenants_the_file_does_not_name(
    space: str, redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert relevo("budgets", "set", "kept", "--daily", "1", "--monthly", "10") == 0
    assert relevo("budgets", "set", "gone:limits", "--daily", "1", "--monthly", "10") == 0
    assert relevo("tenants", "set", "gone/share", "--weight", "2") == 0
    assert relevo("tenants", "chains", "gone@route", "--default", "default") == 0
    source = tmp_path / "t.toml"
    source.write_text(_table("kept", {"daily": '"1"', "monthly": '"10"', "weight": "5"}))
    capsys.readouterr()
    assert relevo("tenants", "apply", str(source)) == 0
    assert capsys.readouterr().out.splitlines()[1:] == ["  ~ kept: weight none -> 5"]
    assert relevo("tenants", "export") == 0
    assert parse_tenants(capsys.readouterr().out).keys() == {
        "gone/share",
        "gone:limits",
        "gone@route",
        "kept",
    }
    assert relevo("tenants", "apply", str(source), "--prune") == 0
    assert capsys.readouterr().out.splitlines() == [
        f"Applied {source}: 0 added, 0 changed, 1 unchanged, 3 pruned",
        "  - gone/share: weight 2",
        "  - gone:limits: daily $1.00; monthly $10.00; overdraft $0.00",
        "  - gone@route: default_chain default",
    ]
    assert relevo("tenants", "export") == 0
    exported = parse_tenants(capsys.readouterr().out)
    assert exported == {
        "kept": TenantSettings(budgets.Limits(1_000_000, 10_000_000), budgets.Share(weight=5))
    }
    # Spend stays: the pruned tenant is still listed, on the default limits (none here).
    assert relevo("budgets", "list", "--json") == 0
    assert [(r["tenant"], r["limits_source"]) for r in out_json(capsys)] == [
        ("gone:limits", "none"),
        ("kept", "configured"),
    ]


def test_a_bad_file_names_each_tenant_and_key_and_writes_nothing(
    space: str, redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "bad.toml"
    source.write_text(
        _table("good", {"daily": '"1"', "monthly": '"10"'})
        + _table("org:2", {"daily": '"12"', "monthly": '"10"', "weight": "0"})
        + _table("team/3", {"daily": '"1"', "colour": '"red"', "allowed_chains": '"default"'})
        + _table("has space", {"weight": "1"})
    )
    assert relevo("tenants", "apply", str(source)) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[:-2] == [
        f'relevo: {source}: [tenants."org:2"] daily: $12.00 is more than monthly $10.00',
        f'relevo: {source}: [tenants."org:2"] weight: a whole number from 1 to 1000',
        f'relevo: {source}: [tenants."team/3"] colour: unknown key (keys: daily, monthly, '
        "fallback_cap, overdraft, max_in_flight, turns_per_minute, input_tokens_per_minute, "
        "weight, default_chain, allowed_chains)",
        f'relevo: {source}: [tenants."team/3"] monthly: required beside daily',
        f'relevo: {source}: [tenants."team/3"] allowed_chains: a list of chains\' names, as text',
    ]
    assert err[-2].startswith(f'relevo: {source}: [tenants."has space"]: tenant id')
    assert err[-1] == f"relevo: tenants apply: 6 problem(s) in {source}; nothing written"
    assert _keys(redis_url, space) == []


def test_chain_names_are_checked_against_the_configuration(
    space: str, redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "chain.toml"
    chains = '\n[chains.triage]\nmodels = ["openai/alpha", "anthropic/beta"]\n'
    config.write_text(
        worker_config(sim="http://127.0.0.1:9", redis_url=redis_url, namespace=space) + chains
    )
    source = tmp_path / "t.toml"
    source.write_text(
        _table("a", {"default_chain": '"triage"'})
        + _table("b", {"allowed_chains": '["default", "premium"]'})
    )
    assert relevo("tenants", "apply", str(source), "--config", str(config)) == 2
    assert capsys.readouterr().err.splitlines()[0] == (
        f"relevo: {source}: [tenants.\"b\"] allowed_chains: no chain named 'premium' "
        "(chains: default, triage)"
    )
    assert _keys(redis_url, space) == []


def test_an_unreadable_setting_is_rewritten_as_the_file_says(
    space: str, redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with redis.Redis.from_url(redis_url) as client:
        client.hset(f"{{{space}}}:budget:shares", "acme", "not a share")
    assert relevo("tenants", "export") == 0
    captured = capsys.readouterr()
    assert "acme: its share cannot be read; left out" in captured.err
    source = tmp_path / "t.toml"
    source.write_text(_table("acme", {"weight": "2"}))
    assert relevo("tenants", "apply", str(source)) == 0
    assert capsys.readouterr().out.splitlines()[1:] == [
        "  ~ acme: weight none -> 2; share unreadable -> rewritten"
    ]
    with redis.Redis.from_url(redis_url) as client:
        assert client.hget(f"{{{space}}}:budget:shares", "acme") == b"|||2"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("tenants = 1", 'tenants: must be tables, [tenants."ID"]'),
        ("[tenants.a", "not TOML: "),
        ('[tenants."a"]\nweight = true', '[tenants."a"] weight: a whole number from 1 to 1000'),
        ('[tenants."a"]\ndaily = "1"\nmonthly = 1e300', '[tenants."a"] monthly: '),
        (
            '[tenants."a"]\ndefault_chain = "x"\nallowed_chains = ["y"]',
            "[tenants.\"a\"] default_chain: default chain 'x' is not one of the allowed chains",
        ),
    ],
)
def test_a_file_problem_is_one_line_naming_where(text: str, problem: str) -> None:
    with pytest.raises(TenantsFileError) as caught:
        parse_tenants(text)
    assert caught.value.problems[0].startswith(problem)


def test_a_tenant_whose_share_changed_is_looked_at_again(
    space: str, redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A tenant a limit parked is due at once under its new share, as after `tenants set`."""
    parked = FairKeys(space).key("parked")
    with redis.Redis.from_url(redis_url) as client:
        client.zadd(parked, {"org:1": 10**13, "org:2": 10**13})
    source = tmp_path / "t.toml"
    source.write_text(_table("org:1", {"max_in_flight": "9"}))
    assert relevo("tenants", "apply", str(source)) == 0
    with redis.Redis.from_url(redis_url) as client:
        assert client.zscore(parked, "org:1") == 0
        assert client.zscore(parked, "org:2") == 10**13
        assert client.lrange(FairKeys(space).key("wake"), 0, -1) == [b"1"]


def test_apply_and_export_with_the_store_on_a_cluster(
    space: str,
    redis_cluster: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Limits and routes spread over the nodes (each tenant's own slot) apply and export
    as on one server; shares stay on the broker's Redis."""
    monkeypatch.setenv("RELEVO_REDIS__SHARED_URL", redis_cluster)
    source = tmp_path / "tenants.toml"
    source.write_text(_many(200))
    assert relevo("tenants", "apply", str(source), "--json") == 0
    assert out_json(capsys)["added"] == 200
    assert relevo("tenants", "export") == 0
    again = tmp_path / "exported.toml"
    again.write_text(capsys.readouterr().out)
    assert parse_tenants(again.read_text()) == parse_tenants(source.read_text())
    assert relevo("tenants", "apply", str(again), "--prune", "--json") == 0
    assert out_json(capsys)["unchanged"] == 200
    assert relevo("budgets", "show", "team/1", "--json") == 0
    assert out_json(capsys)["limits"]["daily_micros"] == 2_010_000
