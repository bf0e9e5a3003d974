"""A worker that Redis refuses (password, ACL) fails closed: no call, never a quiet local view."""

from __future__ import annotations

import asyncio
import time

import pytest

import breakers
from tests.chainkit import KEY, run, settings, turn
from worker.guard.redis_guard import open_guard
from worker.simulator import Simulator
from worker.types import Status


@pytest.mark.parametrize(
    "credentials", ["full:wrong", "noscripts:secret"], ids=["bad-password", "no-permission"]
)
async def test_a_refused_worker_rejects_the_turn_without_calling_anyone(
    acl_redis: int, sim: Simulator, credentials: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RELEVO_TEST_KEY", KEY)
    sim.reset()
    url = f"redis://{credentials}@127.0.0.1:{acl_redis}/0"
    config = settings(sim.url, redis={"url": url, "namespace": "forbidden"})
    guard = open_guard(config)
    try:
        result = await run(config, turn(), guard=guard)
    finally:
        await guard.aclose()
    assert result.status is Status.REJECTED
    assert result.reason == "store_forbidden"
    assert "secret" not in (result.error or "")
    assert sim.calls() == 0


async def test_the_allowed_user_runs_turns(
    acl_redis: int, sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RELEVO_TEST_KEY", KEY)
    url = f"redis://full:secret@127.0.0.1:{acl_redis}/0"
    config = settings(sim.url, redis={"url": url, "namespace": "allowed"})
    guard = open_guard(config)
    try:
        result = await run(config, turn(), guard=guard)
    finally:
        await guard.aclose()
    assert result.status is Status.OK


def test_operators_are_told_redis_refused_them(
    acl_redis: int, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from worker.cli.main import main

    monkeypatch.setenv("RELEVO_REDIS__URL", f"redis://full:wrong@127.0.0.1:{acl_redis}/0")
    assert main(["kill-switch", "status"]) == 6
    err = capsys.readouterr().err
    assert "refused this client" in err
    assert "wrong" not in err


@pytest.mark.parametrize("kept", ["hold", "handoff"])
async def test_a_turn_redis_refuses_to_hold_or_hand_off_is_kept_until_the_grant_is_fixed(
    acl_redis: int, sim: Simulator, namespace: str, monkeypatch: pytest.MonkeyPatch, kept: str
) -> None:
    """A user that may run the guard's scripts but not XADD (an ACL denial, NOPERM): the
    turn the kill switch refuses (held for replay), or the one its budget stops and hands
    to people, keeps its record in the backlog, and it lands once the grant is fixed."""
    monkeypatch.setenv("RELEVO_TEST_KEY", KEY)
    sim.reset()
    admin = breakers.connect(f"redis://full:secret@127.0.0.1:{acl_redis}/0")
    user = f"noxadd-{namespace}"
    await admin.acl_setuser(
        user, enabled=True, passwords=["+secret"], keys=["*"], commands=["+@all", "-xadd"]
    )
    url = f"redis://{user}:secret@127.0.0.1:{acl_redis}/0"
    redis = {"url": url, "namespace": namespace, "rejoin_check_s": 0.1}
    config = settings(sim.url, redis=redis, degradation={"action": "handoff"})
    guard = open_guard(config)
    try:
        if kept == "hold":
            await breakers.KillSwitch(admin, namespace=namespace).on("alice", "incident 9")
        else:
            await guard.ledger.set_limits("acme", 1, 1)
        request = turn()
        result = await run(config, request, guard=guard)
        assert (result.status, result.reason) == (
            (Status.REJECTED, "kill_switch")
            if kept == "hold"
            else (Status.DEGRADED, "tenant_budget_exhausted")
        )
        assert len(guard.backlog) == 1  # refused, and kept: not dropped
        await asyncio.sleep(0.3)
        assert len(guard.backlog) == 1  # still refused: still kept
        await admin.acl_setuser(user, commands=["+xadd"])
        began = time.monotonic()
        while len(guard.backlog):
            assert time.monotonic() - began < 5, "the kept write never landed"
            await asyncio.sleep(0.02)
        if kept == "hold":
            assert [t.turn_id for t in await guard.held.held()] == [request.turn_id]
        else:
            assert [h.turn_id for h in await guard.handoffs.list()] == [request.turn_id]
    finally:
        await guard.aclose()
        await admin.acl_deluser(user)
        await admin.aclose()
    assert sim.calls() == 0
