"""Celery's result backend, read from the turn store: each turn's result is kept once.

The runner saves a turn's result in the turn store (`TurnKeys.result`, the first saved
wins) and publishes it on a channel of the same name. This backend names that key for
each task, so `AsyncResult.get()` (and `relevo enqueue --wait`) reads and waits on the
turn store itself, and a success costs Celery nothing to store: the task is
`ignore_result`, and a success that reaches the backend anyway is not written again.

Celery writes only what the turn store never holds: a task that raised (the runner
returns a result for everything else), and a result the turn store holds under another
id than the task's (a payload that was not a turn, a message sent with a task id of its
own). Those go under Celery's own key, `celery-task-meta-<id>`, and are announced on the
turn's channel, where waiters listen; reads look at the turn's result first, which a
failure never replaces. A stored result that is not JSON is `Unreadable`, naming its turn,
for the reader; the caller reads the result itself with `worker.fleet.schema.read_result`.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from celery import states
from celery.backends import redis as celery_redis
from celery.exceptions import BackendStoreError
from kombu.exceptions import DecodeError

from breakers.schema import ReadProblem
from worker.fleet.errors import Unreadable
from worker.fleet.turnstore import TurnKeys, ask_known, known_from

__all__ = ["TurnResults", "result_backend"]


class TurnResults(celery_redis.RedisBackend):  # type: ignore[misc]
    """Celery's Redis result backend over the turn store's results."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._turn_keys = TurnKeys(self.app.conf.get("relevo_namespace") or "relevo")

    def get_key_for_task(self, task_id: Any, key: str = "") -> Any:
        """The turn's result key: what readers get and the channel they wait on."""
        if key:
            return super().get_key_for_task(task_id, key)
        return self.key_t(self._turn_keys.result(_text(task_id)))

    def _celery_key(self, task_id: Any) -> Any:
        return self._get_key_for(self.task_keyprefix, task_id, "")

    def decode_result(self, payload: Any) -> dict[str, Any]:
        decoded = self.decode(payload)
        if isinstance(decoded, dict) and "turn_id" in decoded:  # a TurnResult, not Celery's meta
            return {
                "status": states.SUCCESS,
                "result": decoded,
                "task_id": decoded["turn_id"],
                "traceback": None,
                "children": [],
                "date_done": None,
            }
        return self.meta_from_decoded(decoded)  # type: ignore[no-any-return]

    def _get_task_meta_for(self, task_id: Any) -> dict[str, Any]:
        turn, other = self.mget([self.get_key_for_task(task_id), self._celery_key(task_id)])
        if not (turn or other):
            return {"status": states.PENDING, "result": None}
        try:
            return self.decode_result(turn or other)
        except DecodeError:
            # Its own message says what was wrong with the text, content included.
            problem = ReadProblem("it is not JSON")
            raise Unreadable("result", problem, turn_id=_text(task_id)) from None

    def _store_result(
        self,
        task_id: Any,
        result: Any,
        state: str,
        traceback: Any = None,
        request: Any = None,
        **kwargs: Any,
    ) -> Any:
        if state == states.SUCCESS:
            return result  # the turn store holds it (the task returns the standing result)
        try:
            stored = self._get_task_meta_for(task_id)["status"] == states.SUCCESS
        except Unreadable:
            stored = True  # a result is stored, damaged or a newer release's: it stands
        if stored:
            return result  # Celery's rule: nothing replaces a success
        expires = self.failure_expires if state == states.FAILURE else self.expires
        try:
            self._write(task_id, result, state, expires, traceback=traceback, request=request)
        except BackendStoreError as exc:
            raise BackendStoreError(str(exc), state=state, task_id=task_id) from exc
        return result

    def known(self, task_id: str) -> bool:
        """Whether a turn was sent under `task_id` and its traces are kept (as
        `TurnStore.known`), or Celery holds a result of its own for it. One round trip."""
        with self.client.pipeline(transaction=False) as pipe:
            ask_known(pipe, self._turn_keys, task_id)
            pipe.exists(self._celery_key(task_id))
            *replies, celery = pipe.execute()
        return bool(celery) or known_from(replies)

    def keep(self, task_id: str, result: dict[str, Any]) -> None:
        """Store a result the turn store does not hold under `task_id`."""
        self._write(task_id, result, states.SUCCESS, self.expires)

    def _write(
        self,
        task_id: Any,
        result: Any,
        state: str,
        expires: Any,
        *,
        traceback: Any = None,
        request: Any = None,
    ) -> None:
        meta = self._get_result_meta(
            result=result, state=state, traceback=traceback, request=request
        )
        meta["task_id"] = _text(task_id)
        self.ensure(self._announce, (task_id, self.encode(meta), expires))

    def _announce(self, task_id: Any, encoded: Any, expires: Any) -> None:
        with self.client.pipeline() as pipe:
            pipe.set(self._celery_key(task_id), encoded, ex=expires or None)
            pipe.publish(self.get_key_for_task(task_id), encoded)
            pipe.execute()

    def _forget(self, task_id: Any) -> None:
        # Only Celery's own record: the turn's result is what keeps a second delivery of
        # the turn from running it again, and it expires with the turn store's TTL.
        self.delete(self._celery_key(task_id))


def _text(task_id: str | bytes) -> str:
    return task_id.decode() if isinstance(task_id, bytes) else task_id


class _SentinelTurnResults(TurnResults, celery_redis.SentinelBackend):  # type: ignore[misc]
    """The same backend, through Redis Sentinel."""


_BACKENDS: dict[str, type[celery_redis.RedisBackend]] = {
    "redis": TurnResults,
    "rediss": TurnResults,
    "sentinel": _SentinelTurnResults,
}


def result_backend(url: str) -> str | None:
    """The result backend for `url`, as Celery names a backend class with its URL."""
    backend = _BACKENDS.get(urlsplit(url).scheme)
    return None if backend is None else f"{__name__}:{backend.__name__}+{url}"
