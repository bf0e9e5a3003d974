"""The `/_sim` admin API, so another process can drive a running simulator.

    GET    /_sim/health              {"ok": true}
    PUT    /_sim/faults/{model}      body {"faults": [Fault, ...]}: replace the model's queue
    DELETE /_sim/faults              forget every fault
    GET    /_sim/calls               {"models": {model: {"calls": n, "<outcome>": n, ...}}}
    GET    /_sim/requests/{model}    {"requests": [RequestRecord, ...]}, oldest first
    POST   /_sim/reset               forget faults, counts and requests
    PUT    /_sim/tokens              body {"lifetime_s": n}: how long new OAuth tokens live

Bad input gets a 422 with {"error": "..."}.
"""

from __future__ import annotations

import json

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from worker.simulator.faults import Fault
from worker.simulator.state import RequestRecord, SimState

__all__ = ["RECORDS", "STATE", "FaultsIn", "TokensIn", "add_admin_routes"]

STATE = web.AppKey("relevo_simulator_state", SimState)
RECORDS: TypeAdapter[list[RequestRecord]] = TypeAdapter(list[RequestRecord])


class TokensIn(BaseModel):
    """The body of `PUT /_sim/tokens`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    lifetime_s: float = Field(gt=0, le=86_400)


class FaultsIn(BaseModel):
    """The body of `PUT /_sim/faults/{model}`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    faults: list[Fault]


def add_admin_routes(app: web.Application) -> None:
    """Mount the admin API on `app` (which holds the state under `STATE`)."""
    app.router.add_get("/_sim/health", _health)
    app.router.add_put("/_sim/faults/{model:.+}", _set_faults)
    app.router.add_delete("/_sim/faults", _clear)
    app.router.add_get("/_sim/calls", _calls)
    app.router.add_get("/_sim/requests/{model:.+}", _requests)
    app.router.add_post("/_sim/reset", _reset)
    app.router.add_put("/_sim/tokens", _set_tokens)


async def _health(request: web.Request) -> web.Response:
    return web.json_response({"ok": True})


def _invalid(exc: ValidationError) -> web.Response:
    errors = exc.errors(include_url=False, include_context=False, include_input=False)
    return web.json_response({"error": json.loads(json.dumps(errors, default=str))}, status=422)


async def _set_faults(request: web.Request) -> web.Response:
    model = request.match_info["model"]
    try:
        body = FaultsIn.model_validate_json(await request.read())
    except ValidationError as exc:
        return _invalid(exc)
    request.app[STATE].set_faults(model, tuple(body.faults))
    return web.json_response({"model": model, "faults": len(body.faults)})


async def _clear(request: web.Request) -> web.Response:
    request.app[STATE].clear()
    return web.json_response({"cleared": True})


async def _calls(request: web.Request) -> web.Response:
    return web.json_response({"models": request.app[STATE].counts()})


async def _requests(request: web.Request) -> web.Response:
    records = request.app[STATE].requests(request.match_info["model"])
    return web.json_response({"requests": RECORDS.dump_python(records, mode="json")})


async def _set_tokens(request: web.Request) -> web.Response:
    try:
        body = TokensIn.model_validate_json(await request.read())
    except ValidationError as exc:
        return _invalid(exc)
    request.app[STATE].tokens.lifetime_s = body.lifetime_s
    return web.json_response({"lifetime_s": body.lifetime_s})


async def _reset(request: web.Request) -> web.Response:
    request.app[STATE].reset()
    return web.json_response({"reset": True})
