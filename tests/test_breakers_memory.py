"""A worker's memory of the kill switch, on a redis-server of the test's own that is
stopped, partitioned away and restarted empty: the memory is refreshed on a timer, only a
current memory is restored, and a person's off is never undone by a restore."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import pytest
import structlog
from structlog.testing import LogCapture, capture_logs
from structlog.typing import EventDict

from breakers import FleetBreakers, KillSwitch, ResilientBreakers, connect
from tests.netkit import free_port
from tests.test_breakers_resilient import Proxy, until
from tests.test_store_faults import restart_empty

pytestmark = pytest.mark.slow

SCOPE = "vendor:openai"
LOOK_S = 0.3  # the workers' rejoin_check_s: how often an idle worker looks
TIMEOUT_S = 0.2


@dataclass
class Store:
    """The private redis-server, restartable; an operator's client and kill switch on it."""

    url: str
    proc: subprocess.Popen[bytes]
    namespace: str
    switch: KillSwitch

    async def restart_empty(self) -> None:
        self.proc = await asyncio.to_thread(restart_empty, self.proc, self.url)

    @asynccontextmanager
    async def worker(
        self, url: str | None = None, look_s: float = LOOK_S
    ) -> AsyncIterator[ResilientBreakers]:
        """A worker's breakers on the store (or on `url`), closed after the block."""
        client = connect(url or self.url, timeout_s=TIMEOUT_S)
        fleet = FleetBreakers(client, namespace=self.namespace)
        worker = ResilientBreakers(fleet, timeout_s=TIMEOUT_S, rejoin_check_s=look_s)
        try:
            yield worker
        finally:
            worker.close()
            await client.aclose()


@pytest.fixture
async def store(
    private_redis: tuple[str, subprocess.Popen[bytes]], namespace: str
) -> AsyncIterator[Store]:
    url, proc = private_redis
    client = connect(url, timeout_s=2.0)
    kept = Store(url, proc, namespace, KillSwitch(client, namespace=namespace))
    try:
        yield kept
    finally:
        await client.aclose()
        if kept.proc is not proc:  # restarted: the fixture ends the first one only
            kept.proc.kill()
            kept.proc.wait(timeout=10)


async def status_until_on(switch: KillSwitch, timeout_s: float = 5.0) -> str:
    """The switch's reason once it is on (an operator's `kill-switch status`, polled)."""
    deadline = time.monotonic() + timeout_s
    while (state := await switch.status()) is None:
        assert time.monotonic() < deadline, "the switch never came back on"
        await asyncio.sleep(0.05)
    return state.reason


async def test_an_idle_worker_keeps_a_switch_a_person_turned_off_off_after_an_empty_restart(
    store: Store,
) -> None:
    async with store.worker() as worker:
        await store.switch.on("alice", "incident 5")
        assert (await worker.check([SCOPE])).kill_switch is not None  # its last turn saw it on
        await store.switch.off("alice")
        await asyncio.sleep(3 * LOOK_S)  # no turn: only the worker's timer looks
        await store.restart_empty()
        await until(lambda: worker.resets == 1)  # noticed by the timer too
        await asyncio.sleep(LOOK_S)
        assert await store.switch.status() is None
        assert (await worker.check([SCOPE])).kill_switch is None


async def test_an_idle_fleet_restores_the_switch_on_time_after_an_empty_restart(
    store: Store,
) -> None:
    """No turn at all: a worker that only looks restores the switch, and status shows it."""
    async with store.worker() as worker:
        await store.switch.on("alice", "incident 7")
        worker.watch()
        await until(lambda: worker.memory.kill is not None)
        await store.restart_empty()
        assert await store.switch.status() is None  # the store lost it
        reason = await status_until_on(store.switch, timeout_s=3 * LOOK_S + 2.0)
        assert reason == "incident 7 [restored: the store lost its data]"
        assert worker.resets == 1


async def test_a_worker_that_was_not_looking_restores_nothing(store: Store) -> None:
    """Its timer stopped (a stalled process): its memory is older than a look period."""
    async with store.worker() as worker:
        await store.switch.on("alice", "incident 10")
        assert (await worker.check([SCOPE])).kill_switch is not None
        worker.close()
        await store.switch.off("alice")
        await asyncio.sleep(3 * LOOK_S)
        await store.restart_empty()
        with capture_logs() as logs:
            assert (await worker.check([SCOPE])).kill_switch is None
        assert await store.switch.status() is None
        reset = [e for e in logs if e["event"] == "breakers.store_reset"]
        assert [(e["kill_switch_seen_on"], e["restoring"]) for e in reset] == [(True, False)]
        assert reset[0]["look_age_s"] > LOOK_S + TIMEOUT_S


@pytest.mark.parametrize("last_on", [False, True])
async def test_while_the_store_is_away_the_switch_reads_as_at_the_last_look(
    store: Store, last_on: bool
) -> None:
    """The worker's last turn ran while the switch was on; a person changed it since."""
    async with store.worker() as worker:
        await store.switch.on("alice", "incident 6")
        assert (await worker.check([SCOPE])).kill_switch is not None
        if not last_on:
            await store.switch.off("alice")
        await asyncio.sleep(3 * LOOK_S)  # idle: the timer looked
        store.proc.send_signal(signal.SIGSTOP)  # every command hangs
        try:
            state = await worker.check([SCOPE])
        finally:
            store.proc.send_signal(signal.SIGCONT)
        assert not state.fleet_view
        assert (state.kill_switch is not None) is last_on


async def test_a_person_s_off_is_confirmed_across_a_restart_that_follows_it(
    store: Store,
) -> None:
    """The store loses its data right after the off, before a worker looked again: that
    worker restores the switch from its older look, and the off's confirmation undoes it."""
    look_s = 2.0  # long enough that the worker does not look between the off and the restart
    async with store.worker(look_s=look_s) as worker:
        await store.switch.on("alice", "incident 8")
        assert (await worker.check([SCOPE])).kill_switch is not None
        with capture_logs() as logs:
            await store.switch.off("alice")
            confirmed = store.switch.confirm_off("alice", after_s=look_s + TIMEOUT_S)
            confirming = asyncio.create_task(confirmed)
            await store.restart_empty()
            restored = (await worker.check([SCOPE])).kill_switch  # a turn arrives
            assert restored is not None  # what the confirmation must undo
            assert restored.reason.endswith("[restored: the store lost its data]")
            undone = await confirming
        assert undone == restored
        assert await store.switch.status() is None
        assert (await worker.check([SCOPE])).kill_switch is None
        assert "breakers.kill_switch_off_again" in [e["event"] for e in logs]


async def test_a_worker_cut_off_when_the_switch_went_off_restores_nothing_when_back(
    store: Store,
) -> None:
    """Partitioned with the switch on in its memory, it comes back to a store that lost its
    data after the off: the others, that saw the off, had their turn; its memory is stale."""
    proxy = Proxy(store.url, free_port())
    await proxy.start()
    cut_off_url = f"redis://127.0.0.1:{proxy.port}/0"
    try:
        async with store.worker(cut_off_url) as cut_off, store.worker() as looking:
            await store.switch.on("alice", "incident 9")
            assert (await cut_off.check([SCOPE])).kill_switch is not None
            looking.watch()
            await proxy.stop()
            await until(lambda: not cut_off.fleet_view)  # its own timer found the store gone
            await store.switch.off("alice")
            await until(lambda: looking.memory.kill is None)
            await store.restart_empty()
            await until(lambda: looking.resets == 1)
            await asyncio.sleep(2 * (LOOK_S + TIMEOUT_S) + 0.3)  # past the restore window
            with capture_logs() as logs:
                await proxy.start()
                await until(lambda: cut_off.resets == 1)
                await asyncio.sleep(0.2)
        assert await store.switch.status() is None
        refused = [e for e in logs if e["event"] == "breakers.kill_switch_not_restored"]
        assert [e["why"] for e in refused] == ["late"]
    finally:
        await proxy.stop()


async def test_a_restore_redis_does_not_answer_is_tried_again_until_it_lands(
    store: Store,
) -> None:
    """The store comes back empty, and goes away again (paused) just as the worker restores
    the switch: the restore is tried again with backoff, each failure logged once, until
    Redis answers, longer after the reset than the restore window. Meanwhile no check sees
    the switch off. Without it: one failed try, and the fleet ran turns on an empty store."""
    captured = LogCapture()

    def pause_at_the_reset(logger: object, name: str, event: EventDict) -> EventDict:
        if event["event"] == "breakers.store_reset":
            store.proc.send_signal(signal.SIGSTOP)  # before the restore's first try
        return event

    structlog.configure(processors=[pause_at_the_reset, captured])
    async with store.worker() as worker:
        await store.switch.on("alice", "incident 11")
        worker.watch()
        await until(lambda: worker.memory.kill is not None)
        await store.restart_empty()
        failed = "breakers.kill_switch_restore_failed"
        await until(lambda: failed in [e["event"] for e in captured.entries])
        paused_at = time.monotonic()
        assert (await worker.check([SCOPE])).kill_switch is not None
        await asyncio.sleep(2 * (LOOK_S + TIMEOUT_S) + 0.3)  # past the restore window
        store.proc.send_signal(signal.SIGCONT)
        reason = await status_until_on(store.switch)
        assert time.monotonic() - paused_at > 2 * (LOOK_S + TIMEOUT_S)
        assert reason == "incident 11 [restored: the store lost its data]"
        assert (await worker.check([SCOPE])).kill_switch is not None
        assert worker.resets == 1
    failures = [e for e in captured.entries if e["event"] == failed]
    assert len(failures) >= 2
    assert [e["attempt"] for e in failures] == list(range(1, len(failures) + 1))
    assert all(e["error"] == "StoreUnavailableError" and e["who"] == "alice" for e in failures)
    assert all(0 < e["retry_in_s"] <= LOOK_S + TIMEOUT_S for e in failures)
    restored = [e for e in captured.entries if e["event"] == "breakers.kill_switch_restored"]
    assert len(restored) == 1
