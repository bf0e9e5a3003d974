"""The console's web application (Starlette, Jinja2): pages, actions, security.

Every page but the login form needs a session; every POST needs the session's (or,
for the login form, the login cookie's) CSRF token and, when the browser sends an
Origin, this server's own. Viewers read with the viewer's Redis client; only an
operator's action ever uses the operator's. Templates autoescape everything they show,
and nothing secret (tokens, Redis URLs, API keys) is ever handed to one.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import structlog
from jinja2 import Environment, PackageLoader, select_autoescape
from redis.asyncio import Redis
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp

import breakers
import budgets
from rediskit import FAILED, refused
from worker.console import filters
from worker.console.actions import Actions, parse_action
from worker.console.auth import Principal, Sessions, Tokens, csrf_ok
from worker.console.gate import FormRefused, client_address, gated, read_form
from worker.console.preview import preview
from worker.console.recent import RecentFilter
from worker.console.throttle import Throttle
from worker.console.views import (
    RESULT_BYTES_READ,
    SORTS,
    fleet_view,
    recent_view,
    tenant_loads,
    tenant_rows,
    tenant_view,
    turn_view,
)
from worker.errors import InputError
from worker.fleet.operations import OperatorFleet
from worker.settings import ConsoleSettings
from worker.types import TURN_ID_RULE, is_turn_id

__all__ = ["Clients", "build_app"]

log = structlog.get_logger("relevo.console")

SESSION_COOKIE = "relevo_session"
LOGIN_COOKIE = "relevo_login"
_USER_ERRORS = (InputError, breakers.BreakersError, budgets.BudgetError)
# The largest form is six fields of at most 1,000 characters, percent-encoded.
_FORM_BYTES = 32 * 1024
_LOGIN_BYTES = 2048
_BACK = re.compile(r"/(tenants|turns|recent)?(\?[A-Za-z0-9_.=&%+:@/-]{0,300})?")


@dataclass(frozen=True)
class Clients:
    """One Redis client per role: each the ACL user that role maps to."""

    viewer: Redis
    operator: Redis


def build_app(
    fleet: OperatorFleet, console: ConsoleSettings, tokens: Tokens, clients: Clients
) -> ASGIApp:
    """The console for `fleet`; the clients are closed when the application shuts down."""
    c = _Console(fleet, console, tokens, clients)
    routes = [
        Route("/login", c.login_form, methods=["GET"]),
        Route("/login", c.login, methods=["POST"]),
        Route("/logout", c.guarded(c.logout), methods=["POST"]),
        Route("/", c.guarded(c.fleet_page), methods=["GET"]),
        Route("/tenants", c.guarded(c.tenants_page), methods=["GET"]),
        Route("/tenant", c.guarded(c.tenant_page), methods=["GET"]),
        Route("/turns", c.guarded(c.turn_page), methods=["GET"]),
        Route("/recent", c.guarded(c.recent_page), methods=["GET"]),
        Route("/act/{kind}", c.guarded(c.act), methods=["POST"]),
        Mount("/static", StaticFiles(packages=[("worker.console", "static")]), name="static"),
    ]
    return gated(Starlette(routes=routes, lifespan=c.lifespan), console)


Handler = Callable[[Request, Principal], Awaitable[Response]]


class _Console:
    """The pages and actions, with the sessions, templates and clients they share."""

    def __init__(
        self, fleet: OperatorFleet, console: ConsoleSettings, tokens: Tokens, clients: Clients
    ) -> None:
        env = Environment(
            loader=PackageLoader("worker.console", "templates"),
            autoescape=select_autoescape(default=True, default_for_string=True),
        )
        filters.install(env)
        self.templates = Jinja2Templates(env=env)
        self.fleet = fleet
        self.poll_ms = int(console.poll_interval_s * 1000)
        self.tokens = tokens
        self.clients = clients
        self.sessions = Sessions(console.session_ttl_s, console.sessions_per_token)
        self.by_address = Throttle(console.logins_per_minute)
        self.by_token = Throttle(console.logins_per_minute)
        self.actions = Actions(fleet, clients.operator)

    def page(self, request: Request, name: str, status: int = 200, **context: Any) -> Response:
        session = self.sessions.get(request.cookies.get(SESSION_COOKIE))
        context.update(
            user=None if session is None else session.principal,
            csrf=None if session is None else session.csrf,
            poll_ms=self.poll_ms,
            notice=None,
        )
        if session is not None and session.notice is not None:
            context["notice"], session.notice = session.notice, None
        return self.templates.TemplateResponse(request, name, context, status_code=status)

    def guarded(self, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        """`handler` behind a session, and for a POST the session's CSRF token."""

        async def run(request: Request) -> Response:
            session = self.sessions.get(request.cookies.get(SESSION_COOKIE))
            if session is None:
                if request.method == "GET" and "fragment" not in request.query_params:
                    here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                    target = "/login" if here == "/" else f"/login?{urlencode({'next': here})}"
                    return RedirectResponse(target, status_code=303)
                return _plain("log in first", 401)
            if request.method == "POST":
                try:
                    form = await read_form(request, _FORM_BYTES)
                except FormRefused as exc:
                    return _plain(str(exc), exc.status)
                if not _same_origin(request) or not csrf_ok(session, form.get("csrf")):
                    log.warning(
                        "console.csrf_refused",
                        who=session.principal.name,
                        address=client_address(request),
                    )
                    return _plain("refused: missing or wrong CSRF token", 403)
                request.state.form = form
            try:
                return await handler(request, session.principal)
            except FAILED as exc:
                log.warning("console.redis_trouble", error=type(exc).__name__)
                retry_ms = self.poll_ms if request.method == "GET" else None
                return self.page(
                    request, "error.html", 503, error=_redis_trouble(exc), retry_ms=retry_ms
                )

        return run

    def _login_page(
        self, request: Request, status: int, error: str | None, back: object = None
    ) -> Response:
        nonce = secrets.token_urlsafe(24)
        shown = _back_to(back if back is not None else request.query_params.get("next"))
        response = self.page(
            request, "login.html", status, login_csrf=nonce, error=error, next=shown
        )
        _set_cookie(request, response, LOGIN_COOKIE, nonce, 600)
        return response

    async def login_form(self, request: Request) -> Response:
        return self._login_page(request, 200, None)

    def _before_body(self, request: Request, address: str) -> Response | None:
        """Cheap refusals first: no body is read without the login cookie and this
        origin, nor past the address's attempts."""
        if not request.cookies.get(LOGIN_COOKIE) or not _same_origin(request):
            return _plain("refused: missing or wrong CSRF token", 403)
        if wait_s := self.by_address.wait_s(address):
            log.warning("console.login_throttled", address=address)
            return _too_many(wait_s)
        return None

    async def login(self, request: Request) -> Response:
        address = client_address(request)
        if (refused := self._before_body(request, address)) is not None:
            return refused
        nonce = request.cookies.get(LOGIN_COOKIE, "")
        try:
            form = await read_form(request, _LOGIN_BYTES)
        except FormRefused as exc:
            return _plain(str(exc), exc.status)
        given = form.get("csrf")
        if not isinstance(given, str) or not secrets.compare_digest(given.encode(), nonce.encode()):
            return _plain("refused: missing or wrong CSRF token", 403)
        token = form.get("token")
        principal = self.tokens.authenticate(token) if isinstance(token, str) else None
        if principal is None:
            log.warning("console.login_refused", address=address)
            return self._login_page(request, 401, "Unknown token.", form.get("next"))
        if wait_s := self.by_token.wait_s(principal.name):
            log.warning("console.login_throttled", who=principal.name, address=address)
            return _too_many(wait_s)
        log.info("console.login", who=principal.name, role=principal.role.value, address=address)
        response = RedirectResponse(_back_to(form.get("next")), status_code=303)
        _set_cookie(request, response, SESSION_COOKIE, self.sessions.start(principal), None)
        response.delete_cookie(LOGIN_COOKIE)
        return response

    async def logout(self, request: Request, who: Principal) -> Response:
        self.sessions.end(request.cookies.get(SESSION_COOKIE))
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(SESSION_COOKIE)
        return response

    async def fleet_page(self, request: Request, who: Principal) -> Response:
        view = await fleet_view(self.fleet, self.clients.viewer)
        name = "fleet_live.html" if "fragment" in request.query_params else "fleet.html"
        replay = self.actions.replay
        return self.page(
            request, name, view=view, replaying=replay is not None and not replay.done()
        )

    async def tenants_page(self, request: Request, who: Principal) -> Response:
        search = request.query_params.get("q", "")[:128]
        sort = request.query_params.get("sort", "used")
        if sort not in SORTS:
            return self.page(request, "error.html", 400, error=f"sort: one of {', '.join(SORTS)}")
        desc = request.query_params.get("desc", "1") != "0"
        tenants = await tenant_rows(
            self.fleet,
            self.clients.viewer,
            search=search,
            sort=sort,
            desc=desc,
            # A viewer reads no prompt: hand-offs (whole turns) are counted for operators only.
            handoffs_from=self.clients.operator if who.may_act else None,
        )
        loads = await tenant_loads(self.fleet, self.clients.viewer, search=search)
        return self.page(
            request,
            "tenants.html",
            rows=tenants.rows,
            tenants=tenants,
            loads=loads,
            q=search,
            sort=sort,
            desc=desc,
        )

    async def tenant_page(self, request: Request, who: Principal) -> Response:
        tenant = request.query_params.get("id", "")
        try:
            budgets.check_tenant(tenant)
        except budgets.InvalidNameError as exc:
            return self.page(request, "error.html", 400, error=str(exc), back="/tenants")
        view = await tenant_view(self.fleet, self.clients.viewer, tenant)
        return self.page(request, "tenant.html", view=view)

    async def recent_page(self, request: Request, who: Principal) -> Response:
        try:
            wanted = RecentFilter.from_query(request.query_params)
        except ValueError as exc:
            return self.page(request, "error.html", 400, error=str(exc))
        shown, recent = await recent_view(self.fleet, self.clients.viewer, wanted)
        return self.page(request, "recent.html", turns=shown, recent=recent, wanted=wanted)

    async def turn_page(self, request: Request, who: Principal) -> Response:
        turn_id = request.query_params.get("id", "")  # as typed: the commands strip nothing
        if not turn_id:
            return self.page(request, "turn.html", view=None, turn_id="")
        if not is_turn_id(turn_id):
            error = f"turn id: {TURN_ID_RULE}"
            return self.page(request, "turn.html", 400, view=None, turn_id=turn_id, error=error)
        view = await turn_view(self.fleet, self.clients.viewer, turn_id)
        return self.page(
            request, "turn.html", view=view, turn_id=turn_id, result_bytes_read=RESULT_BYTES_READ
        )

    async def act(self, request: Request, who: Principal) -> Response:
        if not who.may_act:
            log.warning("console.viewer_refused", who=who.name, path=request.url.path)
            return self.page(request, "error.html", 403, error="A viewer may not act.")
        form = request.state.form
        kind = request.path_params["kind"]
        back = "/tenants" if kind == "limits" else "/"
        try:
            action, warning = parse_action(kind, form)
            # Every time, confirmed or not: an empty cap keeps the cap even in a forged form.
            shown = await preview(self.fleet, self.clients.viewer, action)
            if form.get("confirmed") != "yes":
                warnings = [w for w in (warning, *shown.warnings) if w]
                return self.page(
                    request, "confirm.html", preview=shown, warnings=warnings, back=back
                )
            message = await self.actions.perform(shown.action, who, client_address(request))
        except FAILED:
            raise  # the store's trouble, not the operator's: `guarded` shows it
        except _USER_ERRORS as exc:
            return self.page(request, "error.html", 400, error=str(exc), back=back)
        session = self.sessions.get(request.cookies.get(SESSION_COOKIE))
        if session is not None:
            session.notice = message
        return RedirectResponse(back, status_code=303)

    @asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            if self.actions.replay is not None and self.actions.replaying:
                self.actions.replay.cancel()  # its unfinished turns are held again
            await self.clients.viewer.aclose()
            await self.clients.operator.aclose()


def _plain(text: str, status: int) -> Response:
    return Response(text, status_code=status, media_type="text/plain")


def _too_many(wait_s: float) -> Response:
    response = _plain("too many login attempts: wait a minute", 429)
    response.headers["retry-after"] = str(max(1, round(wait_s)))
    return response


def _back_to(path: object) -> str:
    """Where a login returns to: a path of this console, never another site."""
    if isinstance(path, str) and _BACK.fullmatch(path):
        return path
    return "/"


def _same_origin(request: Request) -> bool:
    """A browser's Origin, when it sends one, must be this server's."""
    origin = request.headers.get("origin")
    if origin is None:
        return True
    own = f"{request.url.scheme}://{request.url.netloc}"
    return secrets.compare_digest(origin.encode(), own.encode())


def _set_cookie(
    request: Request, response: Response, name: str, value: str, max_age: int | None
) -> None:
    response.set_cookie(
        name,
        value,
        max_age=max_age,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


def _redis_trouble(exc: BaseException) -> str:
    if refused(exc):
        return (
            f"Redis refused the console ({type(exc).__name__}): check the role's user and "
            "password and its ACL permissions"
        )
    return f"Redis did not answer ({type(exc).__name__})"
