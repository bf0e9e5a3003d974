"""What a 1 MB image adds to a turn's CPU: relevo's chain against a bare POST of the same.

Three contenders, built once and run interleaved (A B C A B C ...), `--concurrency` turns
in flight, healthy and non-streaming, against one local simulator (OpenAI's wire):
(a) relevo's chain with a text turn, (b) relevo's chain with the same turn plus one
~1 MB PNG (base64 in the request: fitted, estimated, sent as a data URL), (c) a bare
httpx POST of the Chat Completions body that (b) sends, the JSON decoded. Client process
CPU only, this process pinned to one core, the simulator to the other. The figure that
matters is the chain's added CPU for the image turn (b - c) beside its added CPU for the
text turn, over the text turn's own bare POST (measured the same way).

    .venv/bin/python bench/attachments.py           # ~40 s
    .venv/bin/python bench/attachments.py --quick   # ~15 s

Output: `FIGURE <name> <value> <unit>` lines on stdout; progress on stderr.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import random
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import kit
import uvloop
from overhead import measure_cpu
from PIL import Image

from worker.adapters import make_client
from worker.guard import OpenGuard
from worker.settings import Settings, load_settings
from worker.simulator import Fault
from worker.turn.chain import Chain
from worker.types import ImagePart, Message, TextPart, TurnRequest

Turn = Callable[[int], Coroutine[Any, Any, None]]


def image_png(target_bytes: int) -> bytes:
    """A PNG of noise (it does not compress) of about `target_bytes`."""
    side = int((target_bytes / 3) ** 0.5)
    rng = random.Random(7)
    pixels = bytes(rng.getrandbits(8) for _ in range(side * side * 3))
    out = io.BytesIO()
    Image.frombytes("RGB", (side, side), pixels).save(out, "PNG")
    return out.getvalue()


def settings(sim_url: str) -> Settings:
    base = kit.relevo_settings(sim_url, "redis://127.0.0.1:9/0")
    data = base.model_dump(mode="json", by_alias=True)
    for model in data["models"].values():
        model |= {"inputs": ["text", "image"], "image_token_multiplier": 1}
    return load_settings(data=data)


def requests(png: bytes) -> tuple[TurnRequest, TurnRequest]:
    question = TextPart(text=kit.PROMPT)
    photo = ImagePart(media_type="image/png", data=base64.b64encode(png).decode())
    text = kit.turn_request(0)
    image = text.model_copy(update={"messages": (Message(role="user", content=(question, photo)),)})
    return text, image


async def main(args: argparse.Namespace) -> None:
    os.environ.setdefault(kit.KEY_ENV, "sk-bench")
    kit.quiet_relevo_logs()
    _, other = kit.cores()
    with kit.rig(other) as rig:
        rig.sim.set_faults(kit.PRIMARY, Fault(latency_s=0.02))
        config = settings(rig.sim_url)
        png = image_png(args.image_bytes)
        text, image = requests(png)
        kit.figure("attachments_image_bytes", len(png), "bytes")
        async with make_client() as client:
            chain = Chain.from_settings(config, client, guard=OpenGuard())
            url = f"{rig.sim_url}/v1/chat/completions"
            headers = {"authorization": "Bearer sk-bench", "content-type": "application/json"}
            bodies = {
                name: json.dumps(chain.adapters["oa"].request(_call(chain, r)).body).encode()
                for name, r in (("text", text), ("image", image))
            }

            def through_chain(request: TurnRequest) -> Turn:
                async def turn(i: int) -> None:
                    result = await chain.run(request.model_copy(update={"turn_id": f"t{i}"}))
                    if result.status != "ok" or result.step != 0:
                        raise RuntimeError(f"{result.status} {result.reason} {result.error}")

                return turn

            def bare(body: bytes) -> Turn:
                async def turn(i: int) -> None:
                    response = await client.post(url, headers=headers, content=body)
                    response.raise_for_status()
                    response.json()

                return turn

            contenders = {
                "chain_text": through_chain(text),
                "bare_text": bare(bodies["text"]),
                "chain_image": through_chain(image),
                "bare_image": bare(bodies["image"]),
            }
            for turn in contenders.values():
                await measure_cpu(turn, args.warmup, args.concurrency)
            per: dict[str, list[float]] = {name: [] for name in contenders}
            for round_ in range(args.repeats):
                for name, turn in contenders.items():
                    cpu_us, _ = await measure_cpu(turn, args.turns, args.concurrency)
                    per[name].append(cpu_us)
                shown = ", ".join(f"{n} {v[-1]:.0f}" for n, v in per.items())
                kit.say(f"round {round_ + 1}: {shown}")
    med = {name: kit.median(values) for name, values in per.items()}
    for name, value in med.items():
        kit.figure(f"attachments_cpu_{name}", round(value), "us_per_turn")
    kit.figure("attachments_added_text", round(med["chain_text"] - med["bare_text"]), "us_per_turn")
    added = med["chain_image"] - med["bare_image"]
    kit.figure("attachments_added_image", round(added), "us_per_turn")


def _call(chain: Chain, request: TurnRequest) -> Any:
    """The provider call the chain makes for `request` on the primary (for the bare POST)."""
    from worker.adapters import ProviderCall
    from worker.turn.capability import Fit, fit_turn

    fit = fit_turn(request, chain.settings.models["openai/alpha"])
    assert isinstance(fit, Fit)
    return ProviderCall(
        model_id=kit.PRIMARY,
        messages=fit.messages,
        tools=fit.tools,
        max_tokens=request.max_tokens,
        stream=False,
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer, shorter runs")
    parser.add_argument("--turns", type=int, help="turns per run (300; quick 100)")
    parser.add_argument("--repeats", type=int, help="interleaved rounds (5; quick 3)")
    parser.add_argument("--warmup", type=int, default=30, help="turns per contender first")
    parser.add_argument("--concurrency", type=int, default=10, help="turns in flight (10)")
    parser.add_argument("--image-bytes", type=int, default=1_000_000, help="PNG size (1 MB)")
    args = parser.parse_args()
    args.turns = args.turns or (100 if args.quick else 300)
    args.repeats = args.repeats or (3 if args.quick else 5)
    kit.pin(os.getpid(), kit.cores()[0])
    uvloop.run(main(args))
