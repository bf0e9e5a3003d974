"""What naming the fields a call left out costs an attempt: `left_out` builds the wire's body
once more (without encoding it) to read them from it.

For each wire, a short turn (one user message) and a long one (a 200-message tool loop
with a 1 MB image), timed over many runs in this process.

    .venv/bin/python bench/left_out.py

Output: `FIGURE <name> <value> <unit>` lines on stdout.
"""

from __future__ import annotations

import base64
import time

from worker.adapters.base import ProviderCall
from worker.adapters.left_out import left_out
from worker.types import ImagePart, Message, TextPart, Tool, ToolCall

WIRES = {
    "openai": "gpt-4.1",
    "openai-responses": "gpt-5",
    "anthropic": "claude-sonnet-4-5",
    "gemini": "gemini-2.5-flash",
    "bedrock": "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
}
WEATHER = Tool(name="get_weather", description="The weather", parameters={"type": "object"})


def _long() -> tuple[Message, ...]:
    image = ImagePart(media_type="image/png", data=base64.b64encode(b"\0" * 1_000_000).decode())
    messages = [Message(role="user", content=(TextPart(text="Look."), image))]
    for i in range(100):
        call = ToolCall(id=f"call_{i}", name="get_weather", arguments={"city": "Oslo"})
        messages.append(Message(role="assistant", tool_calls=(call,)))
        messages.append(Message(role="tool", tool_call_id=f"call_{i}", content="sunny " * 40))
    return tuple(messages)


def _time_us(wire: str, call: ProviderCall, runs: int) -> float:
    left_out(wire, call)
    start = time.perf_counter()
    for _ in range(runs):
        left_out(wire, call)
    return (time.perf_counter() - start) / runs * 1e6


def main() -> None:
    short = (Message(role="user", content="Hi"),)
    for wire, model_id in WIRES.items():
        for name, messages, runs in (("short", short, 2000), ("long", _long(), 50)):
            call = ProviderCall(
                model_id=model_id,
                messages=messages,
                tools=(WEATHER,),
                max_tokens=1000,
                stream=False,
                temperature=0.5,
                seed=7,
                reasoning_effort="low",
            )
            print(f"FIGURE left_out_{wire}_{name} {_time_us(wire, call, runs):.0f} us")


if __name__ == "__main__":
    main()
