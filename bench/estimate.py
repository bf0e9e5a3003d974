"""The input estimate: how far above real tokenizers it is, and its CPU per call.

Ratios: the estimate (`worker.turn.tokens.text_tokens`) over OpenAI's o200k count, and
over the most tokens any of the four test tokenizers makes (tests/tokenkit.py: o200k,
cl100k, Mistral Tekken and SentencePiece; installed by the `dev` extra, offline), summed
over each kind of text: English prose (docs/*.md), code (worker/*.py and a few stdlib
modules), JSON (generated records and examples/turn.json), CJK and the other scripts
of tests/token_samples.json.

CPU: microseconds of this process per `estimate_tokens` and per `fit_turn` call on a
few typical turns (best of `--repeats` runs of `--calls` calls each).

Images and PDFs: CPU per `fit_turn` on a turn with one 1 MB image (PNG, JPEG) or a
1 MB PDF, the first time (its header or page tree read) and once measured (each part is
read once), and the tokens the estimate counts next to each vendor's documented count
(tests/mediakit.py) for a few image sizes, and per PDF page.

    .venv/bin/python bench/estimate.py     # ~30 s

Output: `FIGURE <name> <value> <unit>` lines on stdout; progress on stderr.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import math
import random
import sys
import time
from collections.abc import Callable, Sequence
from decimal import Decimal
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import kit

from tests import mediakit, tokenkit
from worker.settings import ModelSettings, Serving
from worker.turn import media
from worker.turn.capability import fit_turn
from worker.turn.media import media_rule
from worker.turn.tokens import estimate_tokens, text_tokens
from worker.types import (
    DocumentPart,
    ImagePart,
    Message,
    TextPart,
    Tool,
    ToolCall,
    TurnRequest,
    parse_turn_request,
)

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


def _attachments() -> dict[str, ImagePart | DocumentPart]:
    from PIL import Image
    from pypdf import PdfWriter
    from pypdf.generic import ContentStream, DictionaryObject, NameObject

    rng = random.Random(2)
    noise = Image.frombytes("RGB", (600, 600), rng.randbytes(600 * 600 * 3))
    photo = Image.frombytes("RGB", (1600, 1200), rng.randbytes(1600 * 1200 * 3))
    png, jpeg = io.BytesIO(), io.BytesIO()
    noise.save(png, "PNG")
    photo.save(jpeg, "JPEG", quality=60)
    writer = PdfWriter()
    font = DictionaryObject({NameObject("/F1"): DictionaryObject()})
    for page_number in range(50):
        page = writer.add_blank_page(612, 792)
        page[NameObject("/Resources")] = DictionaryObject({NameObject("/Font"): font})
        lines = "".join(f"(line {i} of page {page_number}) Tj T* " for i in range(600))
        text = ContentStream(None, None)
        text.set_data(f"BT /F1 10 Tf 72 720 Td {lines}ET".encode())
        page[NameObject("/Contents")] = writer._add_object(text)
    pdf = io.BytesIO()
    writer.write(pdf)
    encoded = {
        "png": png.getvalue(),
        "jpeg": jpeg.getvalue(),
        "pdf": pdf.getvalue(),
    }
    for name, data in encoded.items():
        kit.say(f"# {name}: {len(data) / 1e6:.2f} MB")
    b64 = {name: base64.b64encode(data).decode() for name, data in encoded.items()}
    return {
        "png": ImagePart(media_type="image/png", data=b64["png"]),
        "jpeg": ImagePart(media_type="image/jpeg", data=b64["jpeg"]),
        "pdf": DocumentPart(data=b64["pdf"]),
    }


def media_cpu(calls: int, repeats: int) -> None:
    model = ModelSettings(
        vendor="anthropic",
        serve=(Serving(provider="p", model_id="m"),),
        context_window=1_000_000,
        inputs=("text", "image", "pdf"),
    )
    for name, part in _attachments().items():
        message = Message(role="user", content=(TextPart(text="What does it say?"), part))
        request = TurnRequest(tenant_id="t", messages=(message,))

        def first(r: TurnRequest = request) -> None:
            media._SIZES.clear()
            media._PAGES.clear()
            fit_turn(r, model)

        took = best_us(first, max(1, calls // 25), repeats)
        kit.figure(f"fit_turn_cpu_{name}_first", round(took, 1), "us")
        took = best_us(lambda r=request: fit_turn(r, model), calls, repeats)
        kit.figure(f"fit_turn_cpu_{name}_measured", round(took, 1), "us")


def _documented() -> list[tuple[str, str, Decimal | None, Callable[[int, int], int]]]:
    """(model, vendor, the multiple it is configured with, its documented count)."""
    return [
        ("gpt-4o", "openai", Decimal(1), partial(mediakit.openai_tiles, base=85, tile=170)),
        ("gpt-4o-mini", "openai", None, partial(mediakit.openai_tiles, base=2833, tile=5667)),
        ("gpt-4.1-mini", "openai", Decimal("1.62"), _times(1.62, mediakit.openai_patches, 1536)),
        ("gpt-5.4", "openai", Decimal(1), partial(mediakit.openai_patches, budget=2500)),
        ("claude-sonnet-4.5", "anthropic", None, mediakit.anthropic_by_area),
        ("claude-opus-4.7", "anthropic", None, mediakit.anthropic_by_patches),
        ("gemini-2.5", "google", None, mediakit.gemini_tiles),
        ("gemini-3", "google", None, lambda width, height: 1120),
    ]


def _times(
    multiple: float, count: Callable[[int, int, int], int], budget: int
) -> Callable[[int, int], int]:
    return lambda width, height: math.ceil(count(width, height, budget) * multiple)


def media_tokens() -> None:
    for width, height in ((512, 512), (1024, 1024), (1920, 1080), (4032, 3024)):
        size = f"{width}x{height}"
        for model, vendor, multiple, count in _documented():
            rule = media_rule(vendor, multiple)
            estimate = math.ceil(rule.vendor.image(width, height) * rule.multiplier)
            kit.figure(f"image_documented_{model}_{size}", count(width, height), "tokens")
            kit.figure(f"image_estimate_{model}_{size}", estimate, "tokens")
    for vendor in ("openai", "anthropic", "google"):
        rule = media_rule(vendor, Decimal(1) if vendor == "openai" else None)
        page = rule.largest_document // rule.vendor.max_pages
        kit.figure(f"pdf_page_estimate_{vendor}", page, "tokens")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=500, help="calls per timed run (500)")
    parser.add_argument("--repeats", type=int, default=7, help="timed runs, best kept (7)")
    args = parser.parse_args(argv)
    ratios()
    cpu(args.calls, args.repeats)
    media_cpu(args.calls, args.repeats)
    media_tokens()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
