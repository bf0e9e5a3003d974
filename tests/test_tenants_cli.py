"""`relevo tenants`: set, show and clear a tenant's share of the fleet, on the real Redis."""

from __future__ import annotations

import pytest
import redis

from tests.test_operate import ns, out_json, relevo
from worker.fleet.fairqueue import enqueue_sync

__all__ = ["ns"]


def test_tenants_set_list_and_clear(
    ns: str, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert relevo("tenants", "set", "acme", "--max-in-flight", "5", "--weight", "3") == 0
    assert capsys.readouterr().out.strip() == (
        "acme: max in flight 5, turns per minute -, input tokens per minute -, weight 3"
    )
    with redis.Redis.from_url(redis_url) as client:
        for i in range(2):
            enqueue_sync(
                client,
                ns,
                tenant="beta",
                turn_id=f"b{i}",
                deadline_ms=60_000,
                input_tokens=1,
                message="m",
            )
    assert relevo("tenants", "--json") == 0
    assert out_json(capsys) == [
        {
            "tenant": "acme",
            "queued": 0,
            "in_flight": 0,
            "share": "own",
            "max_in_flight": 5,
            "turns_per_minute": None,
            "input_tokens_per_minute": None,
            "weight": 3,
            "unreadable": None,
            "parked_until_ms": None,
        },
        {
            "tenant": "beta",
            "queued": 2,
            "in_flight": 0,
            "share": "default",
            "max_in_flight": None,
            "turns_per_minute": None,
            "input_tokens_per_minute": None,
            "weight": 1,
            "unreadable": None,
            "parked_until_ms": None,
        },
    ]
    assert relevo("tenants", "clear", "acme") == 0
    assert capsys.readouterr().out.strip() == "acme: back to the defaults"
    assert relevo("tenants", "list", "--json") == 0
    assert [r["tenant"] for r in out_json(capsys)] == ["beta"]


def test_tenants_set_refuses_a_weight_out_of_range(
    ns: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert relevo("tenants", "set", "acme", "--weight", "1001") == 2
    assert "--weight: a whole number from 1 to 1000" in capsys.readouterr().err
    assert relevo("tenants", "set", "bad tenant", "--weight", "2") == 2
