"""Where a framework's model sends its turns: a chain in this process, or the fleet.

Both engines take a `TurnRequest` and give back the turn's `TurnResult`; streamed,
the answer's text comes first, piece by piece, and the result last. A framework model
(`worker.frameworks.openai_agents`, `worker.frameworks.pydantic_ai`) is written
against `Engine` alone, so the user picks where turns run with one argument:

    engine = InProcess.from_settings(settings)          # in this process, no Redis guard
    engine = InProcess.from_settings(settings, guard=open_guard(settings))  # shared state
    engine = ThroughFleet(Producer.from_settings(settings))                  # the workers

`answer` turns a result into the reply the agent gets, or `TurnNotAnswered`: a turn
refused, failed or degraded without a reply never reaches an agent as an empty answer.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol

from worker.adapters import make_client
from worker.errors import InputError, RelevoError
from worker.guard.redis_guard import RedisGuard
from worker.settings import DEFAULT_CHAIN, Settings
from worker.turn.chain import Chain
from worker.types import Reply, Status, TurnRequest, TurnResult

if TYPE_CHECKING:  # Celery comes in with a producer, not with an in-process engine
    from worker.fleet.enqueue import Producer

__all__ = [
    "Engine",
    "InProcess",
    "OnDegraded",
    "ThroughFleet",
    "TurnNotAnswered",
    "answer",
    "chain_name",
]

# What an agent gets when relevo degrades a turn without a reply (budget spent, every
# model down, kill switch): an exception, or the degradation message as the answer.
OnDegraded = Literal["raise", "message"]


class Engine(Protocol):
    """Runs turns for a framework's model."""

    @property
    def chains(self) -> tuple[str, ...]:
        """The chains its turns may name (`default` first)."""
        ...

    async def run(self, request: TurnRequest) -> TurnResult:
        """The turn's result, once it has ended."""
        ...

    def stream(self, request: TurnRequest) -> AsyncGenerator[str | TurnResult, None]:
        """The answer's text as it comes, then the turn's result, last; closing the
        generator early (`aclose`) ends the turn."""
        ...

    async def aclose(self) -> None:
        """Close what the engine opened."""
        ...


class TurnNotAnswered(RelevoError):
    """No model's reply for this turn: refused, failed, or degraded without one.

    `result` is the whole report (status, reason, attempts); the message names the
    turn, its status and its reason, never the prompt.
    """

    def __init__(self, result: TurnResult) -> None:
        self.result = result
        super().__init__(f"turn {result.turn_id} {result.status}: {result.reason or 'no reply'}")


def chain_name(engine: Engine, name: str | None) -> str | None:
    """The chain a model named `name` runs its turns on: None for no name (the tenant's
    default chain, else `default`), `default` for `default` (as a request naming it);
    `InputError` naming the chains there are for a name that is none of them."""
    if name is None or name == DEFAULT_CHAIN:
        return name
    if name not in engine.chains:
        known = ", ".join(engine.chains)
        raise InputError(f"no chain named {name!r} (chains: {known})")
    return name


def answer(result: TurnResult, on_degraded: OnDegraded = "raise") -> Reply:
    """The reply an agent gets for `result`, or `TurnNotAnswered`.

    A reply is returned whatever the status (a cheaper stand-in's answer is degraded and
    still an answer). A degraded turn without one gives its degradation message when
    `on_degraded` is `"message"`; anything else raises.
    """
    if result.reply is not None and result.status in (Status.OK, Status.DEGRADED):
        return result.reply
    message = result.degradation_message
    if result.status is Status.DEGRADED and on_degraded == "message" and message:
        return Reply(text=message)
    raise TurnNotAnswered(result)


@dataclass
class InProcess:
    """Turns run here, on a `Chain`: with `OpenGuard` alone, or a Redis guard shared with
    the fleet (breakers, budgets and the kill switch then hold for these turns too)."""

    chain: Chain
    closers: list[Callable[[], Awaitable[None]]] = field(default_factory=list)

    @classmethod
    def from_settings(cls, settings: Settings, *, guard: RedisGuard | None = None) -> InProcess:
        """A chain on `settings`' providers, with its own HTTP client; `guard`, if given
        (`worker.guard.open_guard`), is closed with the engine."""
        client = make_client(settings.http)
        chain = Chain.from_settings(settings, client, guard=guard)
        return cls(chain, [client.aclose] if guard is None else [client.aclose, guard.aclose])

    @property
    def chains(self) -> tuple[str, ...]:
        return self.chain.settings.chain_names

    async def run(self, request: TurnRequest) -> TurnResult:
        return await self.chain.run(request)

    async def stream(self, request: TurnRequest) -> AsyncGenerator[str | TurnResult, None]:
        pieces: asyncio.Queue[str] = asyncio.Queue()
        turn = asyncio.ensure_future(self.chain.run(request, on_text=pieces.put_nowait))
        try:
            while not turn.done() or not pieces.empty():
                getter = asyncio.ensure_future(pieces.get())
                await asyncio.wait((getter, turn), return_when=asyncio.FIRST_COMPLETED)
                if getter.done():
                    yield getter.result()
                else:
                    getter.cancel()
            yield turn.result()
        finally:
            if not turn.done():
                turn.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await turn

    async def aclose(self) -> None:
        for close in self.closers:
            await close()


@dataclass
class ThroughFleet:
    """Turns go to the fleet's workers through `producer`; `timeout_s` bounds the wait
    for each (`TurnTimeout` past it)."""

    producer: Producer
    timeout_s: float = 300.0
    close_producer: bool = True

    @property
    def chains(self) -> tuple[str, ...]:
        return self.producer.chains

    async def run(self, request: TurnRequest) -> TurnResult:
        handle = await self.producer.enqueue(request)
        return await handle.result(self.timeout_s)

    async def stream(self, request: TurnRequest) -> AsyncGenerator[str | TurnResult, None]:
        handle = await self.producer.enqueue(request)
        # A turn that runs again after its text was read raises StreamRestarted: the
        # agent has the text already, and a framework cannot take it back.
        async for text in handle.stream(timeout_s=self.timeout_s):
            yield text
        yield await handle.result(self.timeout_s)

    async def aclose(self) -> None:
        if self.close_producer:
            await self.producer.aclose()
