"""A call costs its whole usage report: cache writes, cache reads and reasoning included.

Turns run over real HTTP against the simulated providers, which report cache and
reasoning tokens in each API's own wire format; every expected cost is worked out
here by hand, in exact fractions of a micro-dollar, from the configured prices.
"""

from __future__ import annotations

import json
import math
from decimal import Decimal
from fractions import Fraction
from typing import Any

import httpx
import pytest
from structlog.testing import capture_logs

import breakers
from tests.chainkit import ID_OF, MODEL_OF, ORDER, model, run, settings, turn
from worker.adapters import AnthropicAdapter, GeminiAdapter, OpenAIAdapter
from worker.adapters.base import Completion
from worker.adapters.sse import SseEvent
from worker.fleet import TurnStore
from worker.guard import Signal
from worker.guard.testing import ScriptedGuard
from worker.settings import ModelSettings, ProviderSettings, Settings
from worker.simulator import Fault, Simulator
from worker.turn.pricing import cost_of
from worker.types import Status, TurnResult, Usage

pytestmark = pytest.mark.usefixtures("fresh_sim", "provider_key")


KINDS = ("openai", "anthropic", "gemini")
WRITTEN, READ, REASONING = 1200, 3401, 250
TEXT_TOKENS = 8  # the simulator's default reply
# Dollars per million tokens are micro-dollars per token: the cost of n tokens is n * price.
PRICES = {"input": "2.5", "output": "10", "write": "3.125", "read": "0.25"}


def priced(url: str, kind: str, *, cache_prices: bool = True) -> Settings:
    """The chain with `kind`'s model first, at PRICES (cache prices left unset if asked)."""
    slug = MODEL_OF[kind]
    extra: dict[str, str] = {}
    if cache_prices:
        extra = {
            "cache_write_usd_per_mtok": PRICES["write"],
            "cache_read_usd_per_mtok": PRICES["read"],
        }
    vendor = slug.split("/")[0]
    provider = {"openai": "oa", "anthropic": "an", "gemini": "gg"}[kind]
    entry = model(vendor, (provider, ID_OF[slug]), **extra)
    entry |= {"input_usd_per_mtok": PRICES["input"], "output_usd_per_mtok": PRICES["output"]}
    return settings(url, ORDER[kind], models={slug: entry})


def cached_reply(**overrides: Any) -> Fault:
    counts = {"cache_write_tokens": WRITTEN, "cache_read_tokens": READ}
    return Fault(**(counts | {"reasoning_tokens": REASONING} | overrides))


def estimate(sim: Simulator, kind: str) -> int:
    """The simulator's estimate of the uncached prompt it was sent (four characters a token)."""
    body = sim.requests(ID_OF[MODEL_OF[kind]])[-1].body
    prompt: Any = {
        "openai": body.get("messages"),
        "anthropic": [body.get("system"), body.get("messages")],
        "gemini": [body.get("systemInstruction"), body.get("contents")],
    }[kind]
    return max(1, len(json.dumps(prompt)) // 4)


def expected_usage(kind: str, uncached: int) -> Usage:
    """What each API reports, in relevo's terms.

    Anthropic's `output_tokens` already includes thinking (and says nothing of how much);
    Gemini writes no cache during a generation, so the simulator's writes are plain prompt.
    """
    output = TEXT_TOKENS + REASONING
    if kind == "anthropic":
        return Usage(
            input_tokens=uncached,
            cache_write_tokens=WRITTEN,
            cache_read_tokens=READ,
            output_tokens=output,
        )
    if kind == "openai":
        return Usage(
            input_tokens=uncached,
            cache_write_tokens=WRITTEN,
            cache_read_tokens=READ,
            output_tokens=output,
            reasoning_tokens=REASONING,
        )
    return Usage(
        input_tokens=uncached + WRITTEN,
        cache_read_tokens=READ,
        output_tokens=output,
        reasoning_tokens=REASONING,
    )


def by_hand(
    *,
    uncached: int,
    written: int,
    read: int,
    output: int,
    cache_prices: bool,
    write_factor: str = "1",
) -> int:
    """Tokens times dollars per million tokens, summed exactly, then rounded up."""
    price = {k: Fraction(v) for k, v in PRICES.items()}
    write_price = price["write"] if cache_prices else price["input"] * Fraction(write_factor)
    read_price = price["read"] if cache_prices else price["input"]
    exact = (
        uncached * price["input"]
        + written * write_price
        + read * read_price
        + output * price["output"]
    )
    return math.ceil(exact)


# --- turns over HTTP ----------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("kind", KINDS)
async def test_a_turn_is_charged_its_cache_writes_reads_and_reasoning(
    sim: Simulator, kind: str, stream: bool
) -> None:
    sim.set_faults(ID_OF[MODEL_OF[kind]], cached_reply())
    guard = ScriptedGuard()
    result = await run(priced(sim.url, kind), turn(stream=stream), guard=guard)

    assert result.status is Status.OK
    assert result.effective_model == MODEL_OF[kind]
    usage = expected_usage(kind, estimate(sim, kind))
    assert result.usage == usage
    cost = by_hand(
        uncached=usage.input_tokens,
        written=usage.cache_write_tokens,
        read=usage.cache_read_tokens,
        output=usage.output_tokens,
        cache_prices=True,
    )
    assert result.cost_micros == cost
    (_, _, signal, settled) = guard.concluded[-1]
    assert (signal, settled) == (Signal.SUCCESS, cost)
    # Pricing the whole prompt at the input price, as before, would charge something else.
    prompt = usage.input_tokens + usage.cache_write_tokens + usage.cache_read_tokens
    flat = math.ceil(
        prompt * Fraction(PRICES["input"]) + usage.output_tokens * Fraction(PRICES["output"])
    )
    assert cost != flat
    # What a result carries, it keeps through its JSON (the form the fleet stores).
    assert TurnResult.model_validate_json(result.to_json()).usage == usage


@pytest.mark.parametrize("kind", KINDS)
async def test_unset_cache_prices_fall_back_to_the_vendors_default(
    sim: Simulator, kind: str
) -> None:
    # Reads at the input price; writes at what the vendor bills over it (Anthropic: 1.25x).
    sim.set_faults(ID_OF[MODEL_OF[kind]], cached_reply())
    result = await run(priced(sim.url, kind, cache_prices=False), turn())

    usage = expected_usage(kind, estimate(sim, kind))
    assert result.usage == usage
    assert result.cost_micros == by_hand(
        uncached=usage.input_tokens,
        written=usage.cache_write_tokens,
        read=usage.cache_read_tokens,
        output=usage.output_tokens,
        cache_prices=False,
        write_factor="1.25" if kind == "anthropic" else "1",
    )


@pytest.mark.parametrize("kind", KINDS)
async def test_a_reply_without_cache_or_reasoning_reports_none(sim: Simulator, kind: str) -> None:
    result = await run(priced(sim.url, kind), turn(stream=True))
    assert result.usage == Usage(input_tokens=estimate(sim, kind), output_tokens=TEXT_TOKENS)


async def test_the_saved_result_keeps_the_whole_usage(
    sim: Simulator, redis_url: str, namespace: str
) -> None:
    sim.set_faults("beta", cached_reply())
    result = await run(priced(sim.url, "anthropic"), turn(stream=True))
    redis = breakers.connect(redis_url, timeout_s=2.0)
    try:
        store = TurnStore(redis, namespace=namespace, ttl_s=60)
        await store.save(result)
        saved = await store.result(result.turn_id)
    finally:
        await redis.aclose()
    assert saved is not None
    assert saved.usage == expected_usage("anthropic", estimate(sim, "anthropic"))
    assert saved.usage.cache_read_tokens == READ
    assert saved.cost_micros == result.cost_micros > 0


# --- the simulator speaks each API's usage -------------------------------------------------


async def test_the_simulator_reports_cache_and_reasoning_as_each_api_does(sim: Simulator) -> None:
    sim.set_faults("alpha", cached_reply(times=1))
    sim.set_faults("beta", cached_reply(times=1))
    sim.set_faults("gamma", cached_reply(times=1))
    messages = [{"role": "user", "content": "Hi"}]
    async with httpx.AsyncClient(base_url=sim.url) as http:
        openai = await http.post(
            "/v1/chat/completions", json={"model": "alpha", "messages": messages}
        )
        anthropic = await http.post(
            "/v1/messages", json={"model": "beta", "messages": messages, "max_tokens": 64}
        )
        gemini = await http.post(
            "/v1beta/models/gamma:generateContent",
            json={"contents": [{"role": "user", "parts": [{"text": "Hi"}]}]},
        )
    used = openai.json()["usage"]
    assert used["prompt_tokens"] == estimate(sim, "openai") + WRITTEN + READ  # cached inside
    assert used["prompt_tokens_details"]["cached_tokens"] == READ
    assert used["prompt_tokens_details"]["cache_write_tokens"] == WRITTEN
    assert used["completion_tokens"] == TEXT_TOKENS + REASONING  # reasoning inside
    assert used["completion_tokens_details"]["reasoning_tokens"] == REASONING
    assert used["total_tokens"] == used["prompt_tokens"] + used["completion_tokens"]

    used = anthropic.json()["usage"]
    assert used["input_tokens"] == estimate(sim, "anthropic")  # the cache's tokens left out
    assert used["cache_creation_input_tokens"] == WRITTEN
    assert used["cache_read_input_tokens"] == READ
    assert used["output_tokens"] == TEXT_TOKENS + REASONING  # thinking inside

    used = gemini.json()["usageMetadata"]
    assert used["promptTokenCount"] == estimate(sim, "gemini") + WRITTEN + READ
    assert used["cachedContentTokenCount"] == READ
    assert used["candidatesTokenCount"] == TEXT_TOKENS  # thoughts beside, not inside
    assert used["thoughtsTokenCount"] == REASONING
    assert used["totalTokenCount"] == used["promptTokenCount"] + TEXT_TOKENS + REASONING


def test_a_fault_refuses_negative_token_counts() -> None:
    for name in ("cache_write_tokens", "cache_read_tokens", "reasoning_tokens"):
        with pytest.raises(ValueError, match=name):
            Fault(**{name: -1})


# --- adapters: wire shapes the simulator does not send --------------------------------------


def provider(kind: str) -> ProviderSettings:
    """A keyless provider nothing listens for: only the adapters' parsing is used."""
    return ProviderSettings.model_validate({"kind": kind, "base_url": "http://127.0.0.1:9"})


def event(name: str, data: dict[str, Any]) -> SseEvent:
    return SseEvent(event=name, data=json.dumps({"type": name, **data}))


async def test_anthropic_counts_repeated_in_message_delta_are_cumulative(
    client: httpx.AsyncClient,
) -> None:
    decoder = AnthropicAdapter(provider("anthropic"), client).decoder()
    zeros = {
        "input_tokens": 0,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": 1,
    }
    decoder.feed(event("message_start", {"message": {"usage": zeros}}))
    final = {
        "input_tokens": 40,
        "cache_creation_input_tokens": 700,
        "cache_read_input_tokens": 9000,
        "output_tokens": 300,
    }
    decoder.feed(event("message_delta", {"delta": {"stop_reason": "end_turn"}, "usage": final}))
    decoder.feed(event("message_stop", {}))
    assert decoder.completion().usage == Usage(
        input_tokens=40, cache_write_tokens=700, cache_read_tokens=9000, output_tokens=300
    )


async def test_anthropic_message_start_counts_stand_when_the_delta_omits_them(
    client: httpx.AsyncClient,
) -> None:
    decoder = AnthropicAdapter(provider("anthropic"), client).decoder()
    start = {
        "input_tokens": 40,
        "cache_creation_input_tokens": 700,
        "cache_read_input_tokens": 9000,
        "output_tokens": 1,
    }
    decoder.feed(event("message_start", {"message": {"usage": start}}))
    usage = {"output_tokens": 300, "output_tokens_details": {"thinking_tokens": 120}}
    decoder.feed(event("message_delta", {"delta": {"stop_reason": "end_turn"}, "usage": usage}))
    decoder.feed(event("message_stop", {}))
    assert decoder.completion().usage == Usage(
        input_tokens=40,
        cache_write_tokens=700,
        cache_read_tokens=9000,
        output_tokens=300,
        reasoning_tokens=120,
    )


async def test_openai_and_gemini_subtract_the_cache_from_their_prompt_counts(
    client: httpx.AsyncClient,
) -> None:
    openai_body = {
        "choices": [{"message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": 1486,
            "completion_tokens": 651,
            "total_tokens": 2137,
            "prompt_tokens_details": {"cached_tokens": 1408, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 512},
        },
    }
    done: Completion = OpenAIAdapter(provider("openai"), client).parse(openai_body)
    assert done.usage == Usage(
        input_tokens=78, cache_read_tokens=1408, output_tokens=651, reasoning_tokens=512
    )
    gemini_body = {
        "candidates": [{"content": {"parts": [{"text": "ok"}]}, "finishReason": "STOP"}],
        "usageMetadata": {
            "promptTokenCount": 5000,
            "cachedContentTokenCount": 4096,
            "candidatesTokenCount": 30,
            "thoughtsTokenCount": 200,
            "totalTokenCount": 5230,
        },
    }
    done = GeminiAdapter(provider("gemini"), client).parse(gemini_body)
    assert done.usage == Usage(
        input_tokens=904, cache_read_tokens=4096, output_tokens=230, reasoning_tokens=200
    )


# --- cost_of ---------------------------------------------------------------------------------


def prices(**usd: str) -> ModelSettings:
    fields = {f"{kind}_usd_per_mtok": Decimal(value) for kind, value in usd.items()}
    return ModelSettings.model_validate(
        {"vendor": "v", "serve": [{"provider": "p", "model_id": "m"}], "context_window": 1000}
        | fields
    )


def test_cost_rounds_up_once_on_the_total() -> None:
    quarter = prices(input="0.25", output="0.25", cache_write="0.25", cache_read="0.25")
    one_each = Usage(input_tokens=1, output_tokens=1, cache_write_tokens=1, cache_read_tokens=1)
    assert cost_of(one_each, quarter) == 1  # four quarters of a micro-dollar, not four
    assert cost_of(Usage(input_tokens=1), quarter) == 1  # a fraction still costs one
    assert cost_of(Usage(input_tokens=4), quarter) == 1  # an exact one is not rounded
    assert cost_of(Usage(input_tokens=5), quarter) == 2
    assert cost_of(Usage(), quarter) == 0


def test_each_kind_of_token_has_its_own_price() -> None:
    model = prices(input="3", output="15", cache_write="3.75", cache_read="0.3")
    assert cost_of(Usage(input_tokens=1_000_000), model) == 3_000_000
    assert cost_of(Usage(cache_write_tokens=1_000_000), model) == 3_750_000
    assert cost_of(Usage(cache_read_tokens=1_000_000), model) == 300_000
    assert cost_of(Usage(output_tokens=1_000_000), model) == 15_000_000
    mixed = Usage(input_tokens=7, cache_write_tokens=11, cache_read_tokens=13, output_tokens=17)
    # 21 + 41.25 + 3.9 + 255 = 321.15 micro-dollars
    assert cost_of(mixed, model) == 322


def test_reasoning_is_priced_once_inside_the_output() -> None:
    model = prices(input="3", output="15")
    with_reasoning = Usage(output_tokens=1000, reasoning_tokens=900)
    assert cost_of(with_reasoning, model) == cost_of(Usage(output_tokens=1000), model) == 15_000


def test_unset_cache_prices_are_the_input_price_but_for_anthropic_writes() -> None:
    unset = prices(input="1.25", output="10")
    assert unset.cache_write_micros_per_mtok == unset.input_micros_per_mtok == 1_250_000
    anthropic = unset.model_copy(update={"vendor": "anthropic"})
    assert anthropic.cache_write_micros_per_mtok == 1_562_500  # 1.25 x 1.25
    assert unset.cache_read_micros_per_mtok == 1_250_000
    usage = Usage(input_tokens=3, cache_write_tokens=5, cache_read_tokens=7)
    assert cost_of(usage, unset) == math.ceil(15 * Fraction("1.25"))  # 18.75 -> 19
    free_reads = prices(input="1.25", output="10", cache_read="0")
    assert free_reads.cache_read_micros_per_mtok == 0
    assert cost_of(Usage(cache_read_tokens=1_000_000), free_reads) == 0


def test_cache_prices_cannot_be_negative() -> None:
    with pytest.raises(ValueError, match="cache_read_usd_per_mtok"):
        prices(input="1", cache_read="-0.1")


@pytest.mark.parametrize("kind", KINDS)
async def test_the_logs_count_every_prompt_token_as_opentelemetry_does(
    sim: Simulator, kind: str
) -> None:
    # gen_ai.usage.input_tokens is the whole prompt, cached or not (GenAI conventions).
    sim.set_faults(ID_OF[MODEL_OF[kind]], cached_reply())
    with capture_logs() as events:
        result = await run(priced(sim.url, kind), turn())
    [completed] = [e for e in events if e["event"] == "turn.completed"]
    usage = result.usage
    assert usage.cache_read_tokens > 0
    total = usage.input_tokens + usage.cache_write_tokens + usage.cache_read_tokens
    assert completed["gen_ai.usage.input_tokens"] == total
