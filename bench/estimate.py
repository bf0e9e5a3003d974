"""The input estimate: how far above real tokenizers it is, and its CPU per call.

Ratios: the estimate (`worker.turn.tokens.text_tokens`) over OpenAI's o200k count, and
over the most tokens any of the four test tokenizers makes (tests/tokenkit.py: o200k,
cl100k, Mistral Tekken and SentencePiece; installed by the `dev` extra, offline), summed
over each kind of text: English prose (docs/*.md), code (worker/*.py and a few stdlib
modules), JSON (generated records and examples/turn.json), CJK and the other scripts
of tests/token_samples.json.

CPU: microseconds of this process per `estimate_tokens` and per `fit_turn` call on a
few typical turns (best of `--repeats` runs of `--calls` calls each).

    .venv/bin/python bench/estimate.py     # ~30 s

Output: `FIGURE <name> <value> <unit>` lines on stdout; progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import kit

from tests import tokenkit
from worker.settings import ModelSettings, Serving
from worker.turn.capability import fit_turn
from worker.turn.tokens import estimate_tokens, text_tokens
from worker.types import Message, Tool, ToolCall, TurnRequest, parse_turn_request

ROOT = Path(__file__).resolve().parent.parent
CJK = ("zh", "ja", "ko")


def _records() -> str:
    rng = random.Random(1)
    rows = [
        {"id": i, "name": f"user_{i}", "email": f"user{i}@example.com", "score": rng.random()}
        for i in range(200)
    ]
    return json.dumps(rows, indent=2)


def kinds() -> dict[str, Sequence[str]]:
    sources = tokenkit.sources()
    samples = tokenkit.SAMPLES
    return {
        "english": sources["english"],
        "code": sources["code"],
        "json": (_records(), (ROOT / "examples/turn.json").read_text()),
        "cjk": tuple(samples[name] for name in CJK),
        **{name: (text,) for name, text in samples.items() if name not in CJK},
    }


def ratios() -> None:
    counters = tokenkit.counters()
    for kind, texts in kinds().items():
        estimate = sum(map(text_tokens, texts))
        o200k = sum(map(counters["o200k"], texts))
        most = sum(max(count(t) for count in counters.values()) for t in texts)
        kit.figure(f"estimate_over_o200k_{kind}", round(estimate / o200k, 2), "x")
        kit.figure(f"estimate_over_most_tokens_{kind}", round(estimate / most, 2), "x")


def turns() -> dict[str, TurnRequest]:
    doc = (ROOT / "docs/budgets.md").read_text()
    chat = [
        Message(role="user" if i % 2 == 0 else "assistant", content=doc[i * 500 : (i + 1) * 500])
        for i in range(20)
    ]
    zh = tokenkit.SAMPLES["zh"]
    tool = Tool(
        name="lookup_order",
        description="Look an order up by its id.",
        parameters={"type": "object", "properties": {"order_id": {"type": "string"}}},
    )
    agent = [Message(role="user", content="Where is order 1234?")]
    for i in range(25):
        call = ToolCall(id=f"call_{i:04d}", name="lookup_order", arguments={"order_id": f"A{i}"})
        agent.append(Message(role="assistant", content="Let me check.", tool_calls=(call,)))
        result = json.dumps({"id": f"A{i}", "status": "shipped", "items": [{"sku": "X1"}]})
        agent.append(Message(role="tool", tool_call_id=call.id, content=result))
    agent.append(Message(role="user", content="And the next one?"))
    return {
        "example": parse_turn_request((ROOT / "examples/turn.json").read_text()),
        "chat_10kb": TurnRequest(
            tenant_id="t", messages=(*chat, Message(role="user", content="ok?"))
        ),
        "cjk_8000": TurnRequest(
            tenant_id="t", messages=(Message(role="user", content=(zh * 80)[:8000]),)
        ),
        "agent_52_messages": TurnRequest(tenant_id="t", messages=tuple(agent), tools=(tool,)),
    }


def best_us(call: Callable[[], object], calls: int, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        began = time.process_time()
        for _ in range(calls):
            call()
        best = min(best, (time.process_time() - began) / calls)
    return best * 1e6


def cpu(calls: int, repeats: int) -> None:
    model = ModelSettings(
        vendor="v", serve=(Serving(provider="p", model_id="m"),), context_window=200_000
    )
    for name, request in turns().items():
        kit.say(f"# {name}: {estimate_tokens(request.messages, request.tools)} tokens estimated")
        took = best_us(lambda r=request: estimate_tokens(r.messages, r.tools), calls, repeats)
        kit.figure(f"estimate_cpu_{name}", round(took, 1), "us")
        took = best_us(lambda r=request: fit_turn(r, model), calls, repeats)
        kit.figure(f"fit_turn_cpu_{name}", round(took, 1), "us")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=500, help="calls per timed run (500)")
    parser.add_argument("--repeats", type=int, default=7, help="timed runs, best kept (7)")
    args = parser.parse_args(argv)
    ratios()
    cpu(args.calls, args.repeats)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
