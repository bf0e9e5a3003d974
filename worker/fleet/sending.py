"""Publishing a turn: the one way both producers (`enqueue_turn`, `Producer`) and the
workers' sweeper send one, and the name of the task it is sent to."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from typing import Any

from celery import Celery
from celery.result import AsyncResult
from kombu.transport import redis as kombu_redis

from worker.fleet.turnstore import TurnKeys
from worker.types import TurnRequest

__all__ = ["TASK_NAME", "send_turn"]

TASK_NAME = "relevo.run_turn"


def send_turn(app: Celery, turn: TurnRequest, *, ignore_result: bool = False) -> AsyncResult:
    """Record the turn as sent, then publish it through Celery's `send_task` (its publish
    signals fire).

    The record (`TurnKeys.sent`, `TurnKeys.payloads`) is written first, on the broker
    connection the publish then uses: a turn the broker loses afterwards is re-sent by
    the workers' sweeper (`worker.fleet.sweeper`) instead of vanishing.
    `ignore_result`: Celery neither stores the task's return value nor subscribes this
    process to it; the turn store still holds the result (what `Producer` reads).
    """
    payload = turn.model_dump(mode="json")
    with app.producer_or_acquire() as producer:
        channel = producer.channel
        if isinstance(channel, kombu_redis.Channel):
            with channel.conn_or_acquire() as client:
                _record_sent(client, app, turn.turn_id, json.dumps(payload))
        return app.send_task(
            TASK_NAME,
            args=[payload],
            task_id=turn.turn_id,
            # None, not False: the task's own setting decides, and the message is as before.
            ignore_result=True if ignore_result else None,
            producer=producer,
        )


def _record_sent(client: Any, app: Celery, turn_id: str, payload: str) -> None:
    """One round trip: the turn's send time and payload, and the keys' expiry refreshed."""
    keys = TurnKeys(app.conf.get("relevo_namespace") or "relevo")
    expires = app.conf.result_expires or 86_400
    ttl_s = int(expires.total_seconds() if isinstance(expires, timedelta) else expires)
    pipe = client.pipeline(transaction=False)
    pipe.zadd(keys.sent, {turn_id: int(time.time() * 1000)})
    pipe.hset(keys.payloads, turn_id, payload)
    pipe.expire(keys.sent, ttl_s)
    pipe.expire(keys.payloads, ttl_s)
    pipe.execute()
