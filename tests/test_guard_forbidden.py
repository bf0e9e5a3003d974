"""A worker that Redis refuses (password, ACL) fails closed: no call, never a quiet local view."""

from __future__ import annotations

import pytest

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
