"""The estimate holds for whole conversations as a chat template frames them, not text
alone: Mistral's v3 template (Tekken and SentencePiece, from `mistral-common`) writes a
tool result as JSON, escaping each control character as \\u00XX, and wraps each tool in
its own JSON object. Both cases once beat the estimate (4.6 times, and 1.1 times with
2,000 tools of empty schemas).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from mistral_common.protocol.instruct.messages import AssistantMessage, ToolMessage, UserMessage
from mistral_common.protocol.instruct.request import ChatCompletionRequest
from mistral_common.protocol.instruct.tool_calls import Function, FunctionCall
from mistral_common.protocol.instruct.tool_calls import Tool as MistralTool
from mistral_common.protocol.instruct.tool_calls import ToolCall as MistralCall
from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

from worker.turn.tokens import estimate_tokens
from worker.types import Message, Tool, ToolCall

TOKENIZERS: dict[str, Callable[[], MistralTokenizer]] = {
    "tekken-v3": lambda: MistralTokenizer.v3(is_tekken=True),
    "sentencepiece-v3": MistralTokenizer.v3,
}
CONTROLS = "".join(chr(i) for i in range(32) if i not in (9, 10, 13))
ANSI = "".join(f"\x1b[3{i % 8}mline {i} ok\x1b[0m\n" for i in range(200))


def _mistral_count(make: Callable[[], MistralTokenizer], result: str, tools: int) -> int:
    calls = [MistralCall(id="abcdefghi", function=FunctionCall(name="f", arguments="{}"))]
    request = ChatCompletionRequest(
        messages=[
            UserMessage(content="hi"),
            AssistantMessage(content=None, tool_calls=calls),
            ToolMessage(content=result, tool_call_id="abcdefghi"),
        ],
        tools=[
            MistralTool(
                function=Function(name="f" if i == 0 else f"t{i}", description="", parameters={})
            )
            for i in range(tools)
        ],
    )
    return len(make().encode_chat_completion(request).tokens)


def _estimate(result: str, tools: int) -> int:
    messages = (
        Message(role="user", content="hi"),
        Message(role="assistant", tool_calls=(ToolCall(id="abcdefghi", name="f", arguments={}),)),
        Message(role="tool", tool_call_id="abcdefghi", content=result),
    )
    defined = [
        Tool(name="f" if i == 0 else f"t{i}", description="", parameters={}) for i in range(tools)
    ]
    return estimate_tokens(messages, defined)


@pytest.mark.parametrize("tokenizer", sorted(TOKENIZERS))
@pytest.mark.parametrize(
    ("result", "tools"),
    [
        (CONTROLS * 100, 1),
        ("\x1b" * 2000, 1),
        (ANSI, 1),
        ("sunny", 230),
        ("sunny", 2000),
    ],
    ids=["every-control", "escapes", "ansi-colours", "230-tools", "2000-tools"],
)
def test_a_framed_conversation_stays_within_the_estimate(
    tokenizer: str, result: str, tools: int
) -> None:
    counted = _mistral_count(TOKENIZERS[tokenizer], result, tools)
    assert counted <= _estimate(result, tools)
