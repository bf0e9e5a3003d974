"""What the `relevo` commands print never acts on the terminal (real Redis, `main`).

A kill-switch reason, a hand-off reason and a model's reply, written to Redis by
anyone who may write there, carry ESC sequences that would erase the line and print a
false "kill switch: OFF", a carriage return and a right-to-left override: every command
that prints them writes those characters out, as the console does; JSON keeps the data.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from redis.asyncio import Redis

import breakers
from budgets.keys import BudgetKeys
from tests.test_cli_surface import on_redis, redis_only, relevo
from worker.fleet.turnstore import TurnStore
from worker.types import Reply, Status, TurnResult

FORGED = "maintenance\x1b[2K\x1b[1G\x1b[32m kill switch: OFF\rall clear \u202eFFO\u202c"
ACTING = ("\x1b", "\r", "\u202e", "\u202c")


def inert(text: str) -> None:
    assert [c for c in ACTING if c in text] == []


@pytest.fixture
def config(redis_url: str, namespace: str, tmp_path: Path) -> str:
    return str(redis_only(tmp_path / "ops.toml", redis_url, namespace))


def test_kill_switch_status_writes_out_what_would_act_on_the_terminal(
    config: str, redis_url: str, namespace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    async def forge(client: Redis) -> None:
        await breakers.KillSwitch(client, namespace=namespace).on("mallory\u202e", FORGED)

    on_redis(redis_url, forge)
    capsys.readouterr()  # the test's own log line of the switch turned on
    try:
        assert relevo("kill-switch", "status", "--config", config) == 0
        shown = capsys.readouterr()
        inert(shown.out + shown.err)
        assert "[U+001B][2K[U+001B][1G[U+001B][32m kill switch: OFF[U+000D]" in shown.out
        assert "who: mallory[U+202E]\n" in shown.out
    finally:
        assert relevo("kill-switch", "off", "--config", config, "--who", "test") == 0


def test_a_table_of_hand_offs_writes_their_reasons_out(
    config: str, redis_url: str, namespace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    reason = "needs a person \u202eFFO\u202c"

    async def hand(client: Redis) -> None:  # as anyone who may write the stream could
        fields = {"tenant": "acme", "turn_id": "t-h", "reason": reason, "payload": "{}"}
        await client.xadd(BudgetKeys(namespace).handoffs(), fields)  # type: ignore[arg-type]

    on_redis(redis_url, hand)
    assert relevo("handoffs", "--config", config) == 0
    table = capsys.readouterr().out
    inert(table)
    assert "needs a person [U+202E]FFO[U+202C]" in table
    assert relevo("handoffs", "--config", config, "--json") == 0
    printed = capsys.readouterr().out
    inert(printed)
    assert json.loads(printed)[0]["reason"] == reason  # the JSON's data is unchanged


def test_a_result_prints_as_json_whose_text_is_escaped_not_acting(
    config: str, redis_url: str, namespace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    result = TurnResult(
        turn_id="t-v",
        tenant_id="acme",
        status=Status.OK,
        primary_model="m",
        step=0,
        reply=Reply(text=FORGED + " \U000e0041"),
    )
    on_redis(redis_url, lambda c: TurnStore(c, namespace=namespace, ttl_s=60).save(result))
    assert relevo("result", "t-v", "--config", config) == 0
    printed = capsys.readouterr().out
    inert(printed)
    assert "\U000e0041" not in printed
    assert json.loads(printed)["reply"]["text"] == FORGED + " \U000e0041"
