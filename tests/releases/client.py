"""A producer and a reader of turns, written against the API relevo 0.1.0 has, to run
under any release's code (tests/releasekit.py starts it under the previous one).

    python tests/releases/client.py enqueue CONFIG < payloads   # one TurnRequest JSON a line
    python tests/releases/client.py read CONFIG < turn_ids      # one turn id a line

The first line of output says where `worker`, `breakers` and `budgets` were imported from
and where the `relevo` distribution's metadata was found. Then one JSON line per input
line, as it is done: `enqueue` sends each payload with `enqueue_turn` as soon as it is read
(the writer sets the pace) and says `{"turn_id", "sent_at"}` or `{"turn_id", "error"}`;
`read` reads each turn's result through the turn store (`Producer.turn(id).result()`) and
through Celery's result backend (`TurnHandle.get()`), and says
`{"turn_id", "store", "store_error", "celery", "celery_error"}` (a result as
`model_dump(mode="json")`, or why it could not be read).
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import sys
import time
from typing import Any

import breakers
import budgets
import worker
from worker.fleet import Producer, TurnHandle, enqueue_turn, make_app
from worker.settings import load_settings

READ_TIMEOUT_S = 30.0
_ERROR_CHARS = 400  # enough to say what failed


def say(line: dict[str, Any]) -> None:
    print(json.dumps(line), flush=True)


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:_ERROR_CHARS]


def enqueue(config: str) -> None:
    settings = load_settings(config, require_secrets=False)
    app = make_app(settings)
    for line in sys.stdin:
        payload = json.loads(line)
        try:
            enqueue_turn(payload, app=app, limits=settings.limits)
        except Exception as exc:
            say({"turn_id": payload.get("turn_id"), "error": _error(exc)})
        else:
            say({"turn_id": payload["turn_id"], "sent_at": time.time()})
    app.close()


async def _from_store(producer: Producer, turn_id: str) -> tuple[Any, str | None]:
    try:
        result = await producer.turn(turn_id).result(timeout_s=READ_TIMEOUT_S)
    except Exception as exc:
        return None, _error(exc)
    return result.model_dump(mode="json"), None


def read(config: str) -> None:
    settings = load_settings(config, require_secrets=False)
    ids = [line.strip() for line in sys.stdin if line.strip()]

    async def stored() -> list[tuple[Any, str | None]]:
        async with Producer.from_settings(settings) as producer:
            return await asyncio.gather(*(_from_store(producer, i) for i in ids))

    from_store = asyncio.run(stored())
    app = make_app(settings)
    for turn_id, (store, store_error) in zip(ids, from_store, strict=True):
        celery, celery_error = None, None
        try:
            handle = TurnHandle(turn_id, app.AsyncResult(turn_id))
            celery = handle.get(timeout_s=READ_TIMEOUT_S).model_dump(mode="json")
        except Exception as exc:
            celery_error = _error(exc)
        say(
            {
                "turn_id": turn_id,
                "store": store,
                "store_error": store_error,
                "celery": celery,
                "celery_error": celery_error,
            }
        )
    app.close()


def main() -> None:
    mode, config = sys.argv[1:]
    say(
        {
            "modules": {m.__name__: m.__file__ for m in (worker, breakers, budgets)},
            "distribution": str(importlib.metadata.distribution("relevo").locate_file("")),
            "version": importlib.metadata.version("relevo"),
        }
    )
    {"enqueue": enqueue, "read": read}[mode](config)


if __name__ == "__main__":
    main()
