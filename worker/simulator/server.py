"""The simulator's HTTP server: the provider APIs on one port, plus the `/_sim` admin API.

Provider routes:

    POST /v1/chat/completions                                 OpenAI (model in the body)
    POST /openai/deployments/{deployment}/chat/completions    Azure OpenAI (model = deployment)
    POST /v1/responses                                        OpenAI Responses API
    POST /openai/responses, /openai/v1/responses              Azure OpenAI's (model in the body)
    POST /v1/messages                                         Anthropic
    POST /v1beta/models/{model}:generateContent               Gemini (also /v1/models/...)
    POST /v1beta/models/{model}:streamGenerateContent?alt=sse
    POST /v1/projects/{p}/locations/{l}/publishers/google/models/{model}:generateContent
         (and :streamGenerateContent?alt=sse)                   Gemini on Vertex AI
    POST /v1/projects/{p}/locations/{l}/publishers/anthropic/models/{model}:rawPredict
         (and :streamRawPredict)                                Claude on Vertex AI
    POST /token                                                 Google OAuth (for Vertex)
    POST /bedrock-runtime/{region}/model/{model}/converse     Bedrock (SigV4 for that region)
    POST /bedrock-runtime/{region}/model/{model}/converse-stream

Admin routes (JSON): see `worker.simulator.admin`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from worker.simulator.admin import STATE, add_admin_routes
from worker.simulator.anthropic_wire import AnthropicDialect
from worker.simulator.bedrock_wire import BedrockDialect, error_type, signature_problem
from worker.simulator.call import Call
from worker.simulator.catalogue import canned
from worker.simulator.faults import CallOutcome, Fault
from worker.simulator.gemini_wire import GeminiDialect
from worker.simulator.oauth import TOKEN_ENDPOINT, TOKEN_PATH, read_assertion
from worker.simulator.openai_wire import OpenAIDialect
from worker.simulator.responses_wire import ResponsesDialect
from worker.simulator.state import RequestRecord, SimState
from worker.simulator.vertex_wire import VertexClaudeDialect, VertexGeminiDialect
from worker.simulator.wire import BadRequest, Dialect, Inspection

__all__ = ["SHUTDOWN_GRACE_S", "build_app", "serve"]

# Stalls are meant to outlast clients; on stop, in-flight calls get this long, then are cancelled.
SHUTDOWN_GRACE_S = 0.2

# Header names that carry an API key, in the order they are looked for; never recorded.
_AUTH_HEADERS = ("authorization", "api-key", "x-api-key", "x-goog-api-key")
_SECRET_HEADERS = frozenset(
    (*_AUTH_HEADERS, "cookie", "proxy-authorization", "x-amz-security-token")
)
# Long conversations (context-trimming tests) must not hit aiohttp's 1 MiB default.
_MAX_BODY_BYTES = 64 * 1024 * 1024

_OPENAI = OpenAIDialect()
_AZURE = OpenAIDialect(azure=True)
_RESPONSES = ResponsesDialect()
_AZURE_RESPONSES = ResponsesDialect(azure=True)
_ANTHROPIC = AnthropicDialect()
_GEMINI = GeminiDialect()
_GEMINI_METHODS = {"generateContent": False, "streamGenerateContent": True}
_VERTEX: dict[str, tuple[Dialect, dict[str, bool]]] = {
    "google": (VertexGeminiDialect(), _GEMINI_METHODS),
    "anthropic": (VertexClaudeDialect(), {"rawPredict": False, "streamRawPredict": True}),
}
_VERTEX_ROUTE = "/v1/projects/{project}/locations/{location}/publishers/{publisher}/models/{spec}"
# Google's 401 body for each reason a Bearer token is refused.
_UNAUTHENTICATED = {
    "CREDENTIALS_MISSING": "credentials_missing",
    "ACCESS_TOKEN_EXPIRED": "access_token_expired",
    "INVALID_CREDENTIALS": "invalid_credentials",
}
_BEDROCK = BedrockDialect()
_BEDROCK_OPERATIONS = {"converse": False, "converse-stream": True}


def build_app(state: SimState) -> web.Application:
    """The aiohttp application serving the provider APIs and the admin API over `state`."""
    app = web.Application(client_max_size=_MAX_BODY_BYTES)
    app[STATE] = state
    app.router.add_post("/v1/chat/completions", _openai)
    app.router.add_post("/openai/deployments/{deployment}/chat/completions", _azure)
    app.router.add_post("/v1/responses", _responses)
    app.router.add_post("/openai/responses", _azure_responses)
    app.router.add_post("/openai/v1/responses", _azure_responses)
    app.router.add_post("/v1/messages", _anthropic)
    app.router.add_post("/v1beta/models/{spec}", _gemini)
    app.router.add_post("/v1/models/{spec}", _gemini)
    app.router.add_post(_VERTEX_ROUTE, _vertex)
    app.router.add_post(TOKEN_PATH, _token)
    app.router.add_post("/bedrock-runtime/{region}/model/{model}/{operation}", _bedrock)
    add_admin_routes(app)
    return app


def serve(host: str = "127.0.0.1", port: int = 8900, *, seed: int | None = None) -> None:
    """Run the simulator in the foreground until interrupted (`relevo simulate`)."""
    web.run_app(
        build_app(SimState(seed)),
        host=host,
        port=port,
        shutdown_timeout=SHUTDOWN_GRACE_S,
        handler_cancellation=True,
        access_log=None,
        print=lambda _: print(f"relevo simulator listening on http://{host}:{port}", flush=True),
    )


async def _openai(request: web.Request) -> web.StreamResponse:
    return await _serve_call(request, _OPENAI, model=None, stream=None)


async def _azure(request: web.Request) -> web.StreamResponse:
    model = request.match_info["deployment"]
    return await _serve_call(request, _AZURE, model=model, stream=None)


async def _responses(request: web.Request) -> web.StreamResponse:
    return await _serve_call(request, _RESPONSES, model=None, stream=None)


async def _azure_responses(request: web.Request) -> web.StreamResponse:
    return await _serve_call(request, _AZURE_RESPONSES, model=None, stream=None)


async def _anthropic(request: web.Request) -> web.StreamResponse:
    return await _serve_call(request, _ANTHROPIC, model=None, stream=None)


async def _gemini(request: web.Request) -> web.StreamResponse:
    model, _, method = request.match_info["spec"].rpartition(":")
    if not model or method not in _GEMINI_METHODS:
        raise web.HTTPNotFound()
    dialect = _GEMINI.for_model(model)
    return await _serve_call(request, dialect, model=model, stream=_GEMINI_METHODS[method])


async def _vertex(request: web.Request) -> web.StreamResponse:
    dialect, methods = _VERTEX.get(request.match_info["publisher"], (None, {}))
    model, _, method = request.match_info["spec"].rpartition(":")
    if dialect is None or not model or method not in methods:
        raise web.HTTPNotFound()
    state = request.app[STATE]
    refused = state.tokens.check(request.headers.get("authorization"))
    if refused is None:
        if isinstance(dialect, GeminiDialect):
            dialect = dialect.for_model(model)
        return await _serve_call(request, dialect, model=model, stream=methods[method])
    record = _record(request, api=dialect.api, model=model, stream=False, body={}, inspection=None)
    state.arrive(record).finish(CallOutcome.ERROR, 401)
    error = canned("vertex", _UNAUTHENTICATED[refused])
    return web.Response(status=401, body=error.body_bytes(), headers=error.headers)


async def _token(request: web.Request) -> web.StreamResponse:
    """The OAuth token endpoint: a token for a JWT-bearer grant, or as its faults say."""
    state = request.app[STATE]
    form = {k: v for k, v in (await request.post()).items() if isinstance(v, str)}
    grant = {"grant_type": form.get("grant_type", "")}  # the signed assertion is not kept
    record = _record(
        request, api="oauth2", model=TOKEN_ENDPOINT, stream=False, body=grant, inspection=None
    )
    ticket = state.arrive(record)
    fault = state.take(TOKEN_ENDPOINT) or Fault()
    try:
        await asyncio.sleep(fault.latency_s + fault.stall_first_byte_s)
    except asyncio.CancelledError:
        ticket.finish(CallOutcome.STALLED, None)
        raise
    problem = read_assertion(form)
    status = fault.status or (400 if problem else None)
    if status is not None:
        ticket.finish(CallOutcome.ERROR, status)
        body = fault.body or {"error": problem or "invalid_grant", "error_description": "refused"}
        return web.json_response(body, status=status)
    ticket.finish(CallOutcome.OK, 200)
    return web.json_response(state.tokens.issue())


async def _bedrock(request: web.Request) -> web.StreamResponse:
    operation = request.match_info["operation"]
    if operation not in _BEDROCK_OPERATIONS:
        raise web.HTTPNotFound()
    url = f"{request.scheme}://{request.host}{request.raw_path}"
    refused = signature_problem(
        url, request.headers, await request.read(), request.match_info["region"]
    )
    if refused is not None:
        status, name, message = refused
        headers = {"x-amzn-ErrorType": name}
        return web.json_response({"message": message}, status=status, headers=headers)
    model, stream = request.match_info["model"], _BEDROCK_OPERATIONS[operation]
    response = await _serve_call(request, _BEDROCK.for_model(model), model=model, stream=stream)
    if response.status >= 400 and not response.prepared:
        response.headers.setdefault("x-amzn-ErrorType", error_type(response.status))
    return response


async def _serve_call(
    request: web.Request, dialect: Dialect, *, model: str | None, stream: bool | None
) -> web.StreamResponse:
    state = request.app[STATE]
    api = dialect.api
    raw: Any = None
    try:
        raw = json.loads(await request.read())
        if not isinstance(raw, dict):
            raise BadRequest("the body must be a JSON object")
        inspection = dialect.inspect(raw)
    except ValueError as exc:  # JSONDecodeError and BadRequest
        body = raw if isinstance(raw, dict) else {}
        label = model or str(body.get("model") or "unknown")
        record = _record(request, api=api, model=label, stream=False, body=body, inspection=None)
        ticket = state.arrive(record)
        status = exc.status if isinstance(exc, BadRequest) else 400
        ticket.finish(CallOutcome.ERROR, status)
        given = exc.body if isinstance(exc, BadRequest) else None
        return web.json_response(given or dialect.error_body(status, str(exc)), status=status)
    name = model or inspection.model or "unknown"
    streaming = inspection.stream if stream is None else stream
    record = _record(
        request, api=api, model=name, stream=streaming, body=raw, inspection=inspection
    )
    ticket = state.arrive(record)
    fault = state.take(name) or Fault()
    call = Call(
        request,
        dialect,
        ticket=ticket,
        fault=fault,
        model=name,
        stream=streaming,
        api_key=_api_key(request) if fault.echo_key else "",
    )
    try:
        return await call.run(inspection)
    except asyncio.CancelledError:
        ticket.finish(CallOutcome.STALLED if call.silent else CallOutcome.ABANDONED, call.status)
        raise
    except ConnectionResetError:
        ticket.finish(CallOutcome.ABANDONED, call.status)
        return call.response or web.Response(status=499)


def _auth_header(request: web.Request) -> str | None:
    for name in _AUTH_HEADERS:
        if name in request.headers:
            return name
    return "key" if "key" in request.query else None


def _api_key(request: web.Request) -> str:
    name = _auth_header(request)
    if name is None:
        return ""
    value = request.query["key"] if name == "key" else request.headers[name]
    return value.removeprefix("Bearer ").strip()


def _record(
    request: web.Request,
    *,
    api: str,
    model: str,
    stream: bool,
    body: Mapping[str, Any],
    inspection: Inspection | None,
) -> RequestRecord:
    return RequestRecord(
        seq=0,
        api=api,
        model=model,
        path=request.path,
        query={k: v for k, v in request.query.items() if k != "key"},
        stream=stream,
        auth_header=_auth_header(request),
        headers={
            k.lower(): v for k, v in request.headers.items() if k.lower() not in _SECRET_HEADERS
        },
        body=body,
        tools=inspection.tools if inspection else (),
        message_count=inspection.message_count if inspection else 0,
        outcome=None,
        status=None,
    )
