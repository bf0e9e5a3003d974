"""Write tests/wire_reference.json from the providers' published SDK types, at pinned tags.

    python tests/wire_reference_build.py OPENAI_PYTHON ANTHROPIC_SDK_PYTHON PYTHON_GENAI OUT

Each of the first three is a git clone (openai/openai-python, anthropics/anthropic-sdk-
python, googleapis/python-genai) holding the tags pinned below; Bedrock's table comes from
the installed botocore's bedrock-runtime service model. The request shapes are read from
the SDKs' TypedDicts (openai, anthropic) and pydantic models (genai, camelCased as the
SDK sends them); which class each shape is, and which unions pick their variant by which
field, is written here.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from typing import Any

import botocore
from botocore.loaders import create_loader

OAI = (sys.argv[1], "v3.3.1")
ANT = (sys.argv[2], "v0.121.0")
GEN = (sys.argv[3], "v2.19.0")


def classes(repo: str, tag: str, path: str) -> dict[str, Any]:
    """Each class of `path` at `tag`: its annotated fields; each module-level alias: its source."""
    src = subprocess.run(
        ["git", "-C", repo, "show", f"{tag}:{path}"], capture_output=True, text=True, check=True
    ).stdout
    out: dict[str, Any] = {}
    for node in ast.parse(src).body:
        if isinstance(node, ast.ClassDef):
            out[node.name] = {
                st.target.id: ast.unparse(st.annotation)
                for st in node.body
                if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)
            }
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
            if isinstance(target, ast.Name) and node.value is not None:
                out[target.id] = ast.unparse(node.value)
    return out


def commit(repo, tag):
    return subprocess.run(
        ["git", "-C", repo, "rev-list", "-n1", tag], capture_output=True, text=True, check=True
    ).stdout.strip()


LIT = re.compile(r"Literal\[([^\[\]]*)\]")


def literal(annotation):
    found = LIT.findall(annotation)
    if len(found) != 1:
        return None
    values = [ast.literal_eval(v.strip()) for v in found[0].split(",") if v.strip()]
    return values if all(isinstance(v, str) for v in values) else None


def typed(src, path, cls, children=None, *, enums=None, drop=()):
    repo, tag = src
    fields = classes(repo, tag, path)[cls]
    shape = {"from": f"{path}::{cls}", "fields": sorted(f for f in fields if f not in drop)}
    found = {f: literal(a) for f, a in fields.items() if f not in drop}
    found = {f: v for f, v in found.items() if v and f not in (children or {})}
    found.update(enums or {})
    if found:
        shape["enums"] = dict(sorted(found.items()))
    if children:
        shape["children"] = children
    return shape


def union(by, variants, values=None, source=None):
    shape = {"by": by, "variants": variants}
    if values:
        shape["values"] = values
    if source:
        shape["from"] = source
    return shape


def effort_values():
    repo, tag = OAI
    return literal(
        classes(repo, tag, "src/openai/types/shared_params/reasoning_effort.py")["ReasoningEffort"]
    )


C = "src/openai/types/chat/"
S = "src/openai/types/shared_params/"
R = "src/openai/types/responses/"
chat_base = classes(*OAI, C + "completion_create_params.py")["CompletionCreateParamsBase"]
chat = {
    "reference": f"openai/openai-python {OAI[1]} ({commit(*OAI)}), src/openai/types/chat",
    "root": "request",
    "shapes": {
        "request": {
            "from": C + "completion_create_params.py::CompletionCreateParamsBase (+ stream)",
            "fields": sorted([*chat_base, "stream"]),
            "enums": {"reasoning_effort": effort_values()},
            "children": {
                "messages": "message",
                "tools": "tool",
                "tool_choice": "tool_choice",
                "response_format": "response_format",
                "stream_options": "stream_options",
            },
        },
        "message": union(
            "role",
            {
                "system": "system",
                "developer": "system",
                "user": "user",
                "assistant": "assistant",
                "tool": "tool_message",
            },
            source=C + "chat_completion_message_param.py::ChatCompletionMessageParam",
        ),
        "system": typed(
            OAI,
            C + "chat_completion_system_message_param.py",
            "ChatCompletionSystemMessageParam",
            {"content": "text_part"},
        ),
        "user": typed(
            OAI,
            C + "chat_completion_user_message_param.py",
            "ChatCompletionUserMessageParam",
            {"content": "part"},
        ),
        "assistant": typed(
            OAI,
            C + "chat_completion_assistant_message_param.py",
            "ChatCompletionAssistantMessageParam",
            {"content": "text_part", "tool_calls": "tool_call"},
        ),
        "tool_message": typed(
            OAI,
            C + "chat_completion_tool_message_param.py",
            "ChatCompletionToolMessageParam",
            {"content": "text_part"},
        ),
        "tool_call": typed(
            OAI,
            C + "chat_completion_message_function_tool_call_param.py",
            "ChatCompletionMessageFunctionToolCallParam",
            {"function": "called"},
        ),
        "called": typed(OAI, C + "chat_completion_message_function_tool_call_param.py", "Function"),
        "part": union(
            "type",
            {"text": "text_part", "image_url": "image_part", "file": "file_part"},
            source=C + "chat_completion_content_part_param.py::ChatCompletionContentPartParam",
        ),
        "text_part": typed(
            OAI,
            C + "chat_completion_content_part_text_param.py",
            "ChatCompletionContentPartTextParam",
        ),
        "image_part": typed(
            OAI,
            C + "chat_completion_content_part_image_param.py",
            "ChatCompletionContentPartImageParam",
            {"image_url": "image_url"},
        ),
        "image_url": typed(OAI, C + "chat_completion_content_part_image_param.py", "ImageURL"),
        "file_part": typed(
            OAI, C + "chat_completion_content_part_param.py", "File", {"file": "file"}
        ),
        "file": typed(OAI, C + "chat_completion_content_part_param.py", "FileFile"),
        "tool": typed(
            OAI,
            C + "chat_completion_function_tool_param.py",
            "ChatCompletionFunctionToolParam",
            {"function": "function"},
        ),
        "function": typed(OAI, S + "function_definition.py", "FunctionDefinition", drop=()),
        "tool_choice": union(
            "type",
            {"function": "named_tool"},
            values=["none", "auto", "required"],
            source=C
            + "chat_completion_tool_choice_option_param.py::ChatCompletionToolChoiceOptionParam",
        ),
        "named_tool": typed(
            OAI,
            C + "chat_completion_named_tool_choice_param.py",
            "ChatCompletionNamedToolChoiceParam",
            {"function": "named_function"},
        ),
        "named_function": typed(OAI, C + "chat_completion_named_tool_choice_param.py", "Function"),
        "response_format": union(
            "type",
            {"json_schema": "json_schema_format", "json_object": "json_object_format"},
            source=C + "completion_create_params.py::ResponseFormat",
        ),
        "json_schema_format": typed(
            OAI,
            S + "response_format_json_schema.py",
            "ResponseFormatJSONSchema",
            {"json_schema": "json_schema"},
        ),
        "json_schema": typed(OAI, S + "response_format_json_schema.py", "JSONSchema"),
        "json_object_format": typed(
            OAI, S + "response_format_json_object.py", "ResponseFormatJSONObject"
        ),
        "stream_options": typed(
            OAI, C + "chat_completion_stream_options_param.py", "ChatCompletionStreamOptionsParam"
        ),
    },
}
IMAGE_DETAIL = literal(classes(*OAI, R + "image_detail.py")["ImageDetail"])
resp_base = classes(*OAI, R + "response_create_params.py")["ResponseCreateParamsBase"]
includable = literal(classes(*OAI, R + "response_includable.py")["ResponseIncludable"])
responses = {
    "reference": f"openai/openai-python {OAI[1]} ({commit(*OAI)}), src/openai/types/responses",
    "root": "request",
    "shapes": {
        "request": {
            "from": R + "response_create_params.py::ResponseCreateParamsBase (+ stream)",
            "fields": sorted([*resp_base, "stream"]),
            "enums": {"include": includable},
            "children": {
                "input": "item",
                "tools": "tool",
                "tool_choice": "tool_choice",
                "text": "text",
                "reasoning": "reasoning",
            },
        },
        "item": union(
            "type",
            {
                "message": "message",
                "function_call": "function_call",
                "function_call_output": "function_call_output",
                "reasoning": "reasoning_item",
            },
            source=R + "response_input_param.py::ResponseInputItemParam",
        ),
        "message": typed(
            OAI, R + "easy_input_message_param.py", "EasyInputMessageParam", {"content": "part"}
        ),
        "function_call": typed(
            OAI, R + "response_function_tool_call_param.py", "ResponseFunctionToolCallParam"
        ),
        "function_call_output": typed(
            OAI, R + "response_input_param.py", "FunctionCallOutput", {"output": "output_part"}
        ),
        "output_part": union(
            "type",
            {
                "input_text": "output_text",
                "input_image": "output_image",
                "input_file": "output_file",
            },
            source=R
            + "response_function_call_output_item_list_param.py"
            + "::ResponseFunctionCallOutputItemListParam",
        ),
        "output_text": typed(
            OAI, R + "response_input_text_content_param.py", "ResponseInputTextContentParam"
        ),
        "output_image": typed(
            OAI,
            R + "response_input_image_content_param.py",
            "ResponseInputImageContentParam",
            enums={"detail": IMAGE_DETAIL},
        ),
        "output_file": typed(
            OAI, R + "response_input_file_content_param.py", "ResponseInputFileContentParam"
        ),
        "reasoning_item": typed(
            OAI,
            R + "response_reasoning_item_param.py",
            "ResponseReasoningItemParam",
            {"summary": "summary"},
        ),
        "summary": typed(OAI, R + "response_reasoning_item_param.py", "Summary"),
        "part": union(
            "type",
            {"input_text": "input_text", "input_image": "input_image", "input_file": "input_file"},
            source=R + "response_input_message_content_list_param.py::ResponseInputContentParam",
        ),
        "input_text": typed(OAI, R + "response_input_text_param.py", "ResponseInputTextParam"),
        "input_image": typed(
            OAI,
            R + "response_input_image_param.py",
            "ResponseInputImageParam",
            enums={"detail": IMAGE_DETAIL},
        ),
        "input_file": typed(OAI, R + "response_input_file_param.py", "ResponseInputFileParam"),
        "tool": typed(OAI, R + "function_tool_param.py", "FunctionToolParam"),
        "tool_choice": union(
            "type",
            {"function": "tool_choice_function"},
            values=["none", "auto", "required"],
            source=R + "response_create_params.py::ToolChoice",
        ),
        "tool_choice_function": typed(
            OAI, R + "tool_choice_function_param.py", "ToolChoiceFunctionParam"
        ),
        "text": typed(
            OAI,
            R + "response_text_config_param.py",
            "ResponseTextConfigParam",
            {"format": "format"},
        ),
        "format": union(
            "type",
            {"json_schema": "json_schema_format", "json_object": "json_object_format"},
            source=R + "response_format_text_config_param.py::ResponseFormatTextConfigParam",
        ),
        "json_schema_format": typed(
            OAI,
            R + "response_format_text_json_schema_config_param.py",
            "ResponseFormatTextJSONSchemaConfigParam",
        ),
        "json_object_format": typed(
            OAI, S + "response_format_json_object.py", "ResponseFormatJSONObject"
        ),
        "reasoning": typed(OAI, S + "reasoning.py", "Reasoning", enums={"effort": effort_values()}),
    },
}
A = "src/anthropic/types/"
msg_base = classes(*ANT, A + "message_create_params.py")["MessageCreateParamsBase"]
block_children = {"source": "source", "content": "result_block"}
anthropic = {
    "reference": f"anthropics/anthropic-sdk-python {ANT[1]} ({commit(*ANT)}), src/anthropic/types",
    "root": "request",
    "shapes": {
        "request": {
            "from": A + "message_create_params.py::MessageCreateParamsBase (+ stream)",
            "fields": sorted([*msg_base, "stream"]),
            "children": {
                "messages": "message",
                "tools": "tool",
                "tool_choice": "tool_choice",
                "thinking": "thinking",
                "output_config": "output_config",
                "system": "text",
            },
        },
        "message": typed(ANT, A + "message_param.py", "MessageParam", {"content": "block"}),
        "block": union(
            "type",
            {
                "text": "text",
                "image": "image",
                "document": "document",
                "tool_use": "tool_use",
                "tool_result": "tool_result",
                "thinking": "thinking_block",
                "redacted_thinking": "redacted_thinking",
            },
            source=A + "message_param.py::MessageParam.content",
        ),
        "result_block": union(
            "type",
            {"text": "text", "image": "image", "document": "document"},
            source=A + "tool_result_block_param.py::Content",
        ),
        "text": typed(ANT, A + "text_block_param.py", "TextBlockParam"),
        "image": typed(
            ANT, A + "image_block_param.py", "ImageBlockParam", {"source": "image_source"}
        ),
        "image_source": union(
            "type",
            {"base64": "base64_image", "url": "url_source"},
            source=A + "image_block_param.py::Source",
        ),
        "base64_image": typed(ANT, A + "base64_image_source_param.py", "Base64ImageSourceParam"),
        "url_source": typed(ANT, A + "url_image_source_param.py", "URLImageSourceParam"),
        "document": typed(
            ANT, A + "document_block_param.py", "DocumentBlockParam", {"source": "document_source"}
        ),
        "document_source": union(
            "type",
            {"base64": "base64_pdf", "url": "url_pdf"},
            source=A + "document_block_param.py::Source",
        ),
        "base64_pdf": typed(ANT, A + "base64_pdf_source_param.py", "Base64PDFSourceParam"),
        "url_pdf": typed(ANT, A + "url_pdf_source_param.py", "URLPDFSourceParam"),
        "tool_use": typed(ANT, A + "tool_use_block_param.py", "ToolUseBlockParam"),
        "tool_result": typed(
            ANT,
            A + "tool_result_block_param.py",
            "ToolResultBlockParam",
            {"content": "result_block"},
        ),
        "thinking_block": typed(ANT, A + "thinking_block_param.py", "ThinkingBlockParam"),
        "redacted_thinking": typed(
            ANT, A + "redacted_thinking_block_param.py", "RedactedThinkingBlockParam"
        ),
        "tool": typed(ANT, A + "tool_param.py", "ToolParam"),
        "tool_choice": union(
            "type",
            {
                "auto": "choice_auto",
                "any": "choice_any",
                "tool": "choice_tool",
                "none": "choice_none",
            },
            source=A + "tool_choice_param.py::ToolChoiceParam",
        ),
        "choice_auto": typed(ANT, A + "tool_choice_auto_param.py", "ToolChoiceAutoParam"),
        "choice_any": typed(ANT, A + "tool_choice_any_param.py", "ToolChoiceAnyParam"),
        "choice_tool": typed(ANT, A + "tool_choice_tool_param.py", "ToolChoiceToolParam"),
        "choice_none": typed(ANT, A + "tool_choice_none_param.py", "ToolChoiceNoneParam"),
        "thinking": union(
            "type",
            {
                "enabled": "thinking_enabled",
                "adaptive": "thinking_adaptive",
                "disabled": "thinking_disabled",
            },
            source=A + "thinking_config_param.py::ThinkingConfigParam",
        ),
        "thinking_enabled": typed(
            ANT, A + "thinking_config_enabled_param.py", "ThinkingConfigEnabledParam"
        ),
        "thinking_adaptive": typed(
            ANT, A + "thinking_config_adaptive_param.py", "ThinkingConfigAdaptiveParam"
        ),
        "thinking_disabled": typed(
            ANT, A + "thinking_config_disabled_param.py", "ThinkingConfigDisabledParam"
        ),
        "output_config": typed(
            ANT, A + "output_config_param.py", "OutputConfigParam", {"format": "output_format"}
        ),
        "output_format": typed(ANT, A + "json_output_format_param.py", "JSONOutputFormatParam"),
    },
}
# Vertex rawPredict: the Messages body without `model`, with `anthropic_version`.
vertex_claude = json.loads(json.dumps(anthropic))
vertex_claude["reference"] += (
    "; Vertex AI rawPredict: `model` in the URL, `anthropic_version` in the body"
    " (src/anthropic/lib/vertex/_client.py)"
)
vertex_claude["shapes"]["request"]["fields"] = sorted(
    [f for f in anthropic["shapes"]["request"]["fields"] if f != "model"] + ["anthropic_version"]
)

# --- python-genai: pydantic models, snake_case in the SDK, camelCase on the wire
src = subprocess.run(
    ["git", "-C", GEN[0], "show", f"{GEN[1]}:google/genai/types.py"],
    capture_output=True,
    text=True,
    check=True,
).stdout


def camel(name):
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


def gfields(cls):
    i = src.index(f"\nclass {cls}(")
    j = src.find("\nclass ", i + 5)
    return [camel(f) for f in re.findall(r"^  ([a-z_][a-z0-9_]*): ", src[i:j], re.M)]


def genum(cls):
    i = src.index(f"\nclass {cls}(")
    j = src.find("\nclass ", i + 5)
    return [v for _, v in re.findall(r"^  ([A-Z_0-9]+) = '([^']*)'", src[i:j], re.M)]


def gtyped(cls, children=None, enums=None):
    shape = {"from": f"google/genai/types.py::{cls}", "fields": sorted(gfields(cls))}
    if enums:
        shape["enums"] = enums
    if children:
        shape["children"] = children
    return shape


TOP = [
    "contents",
    "systemInstruction",
    "tools",
    "toolConfig",
    "safetySettings",
    "cachedContent",
    "generationConfig",
    "serviceTier",
]
gemini = {
    "reference": f"googleapis/python-genai {GEN[1]} ({commit(*GEN)}), google/genai/types.py"
    " (fields camelCased, as the SDK sends them); the request's top level from"
    " google/genai/models.py _GenerateContentParameters_to_mldev and"
    " _GenerateContentConfig_to_mldev",
    "root": "request",
    "shapes": {
        "request": {
            "from": "google/genai/models.py::_GenerateContentParameters_to_mldev",
            "fields": sorted(TOP),
            "children": {
                "contents": "content",
                "systemInstruction": "content",
                "tools": "tool",
                "toolConfig": "tool_config",
                "generationConfig": "generation_config",
            },
        },
        "content": gtyped("Content", {"parts": "part"}),
        "part": gtyped(
            "Part",
            {
                "inlineData": "blob",
                "fileData": "file_data",
                "functionCall": "function_call",
                "functionResponse": "function_response",
            },
        ),
        "blob": gtyped("Blob"),
        "file_data": gtyped("FileData"),
        "function_call": gtyped("FunctionCall"),
        "function_response": gtyped("FunctionResponse", {"parts": "function_response_part"}),
        "function_response_part": gtyped(
            "FunctionResponsePart",
            {"inlineData": "function_response_blob", "fileData": "file_data"},
        ),
        "function_response_blob": gtyped("FunctionResponseBlob"),
        "tool": gtyped("Tool", {"functionDeclarations": "function_declaration"}),
        "function_declaration": gtyped("FunctionDeclaration"),
        "tool_config": gtyped("ToolConfig", {"functionCallingConfig": "function_calling_config"}),
        "function_calling_config": gtyped(
            "FunctionCallingConfig", enums={"mode": genum("FunctionCallingConfigMode")}
        ),
        "generation_config": gtyped("GenerationConfig", {"thinkingConfig": "thinking_config"}),
        "thinking_config": gtyped(
            "ThinkingConfig", enums={"thinkingLevel": genum("ThinkingLevel")}
        ),
    },
}
vertex_gemini = json.loads(json.dumps(gemini))
vertex_gemini["reference"] += (
    "; Vertex AI adds labels and modelArmorConfig (_GenerateContentConfig_to_vertex)"
)
vertex_gemini["shapes"]["request"]["fields"] = sorted([*TOP, "labels", "modelArmorConfig"])
vertex_gemini["shapes"]["request"]["from"] = (
    "google/genai/models.py::_GenerateContentParameters_to_vertex"
)

# --- botocore's service model for bedrock-runtime, ConverseRequest and what it names

model = create_loader().load_service_model("bedrock-runtime", "service-2")
shapes = model["shapes"]
conv = {}


def walk(name):
    key = name
    if key in conv:
        return key
    shape = shapes[name]
    if shape["type"] == "list":
        return walk(shape["member"]["shape"])
    if shape["type"] == "map":
        return None
    if shape["type"] == "structure" and not shape.get("document"):
        conv[key] = {}
        out = {"from": f"ConverseRequest closure: {name}", "fields": sorted(shape["members"])}
        children, enums = {}, {}
        for member, spec in shape["members"].items():
            target = shapes[spec["shape"]]
            if target["type"] in ("structure", "list"):
                inner = walk(spec["shape"])
                if inner:
                    children[member] = inner
            elif target["type"] == "string" and "enum" in target:
                enums[member] = target["enum"]
        if children:
            out["children"] = children
        if enums:
            out["enums"] = enums
        conv[key] = out
        return key
    return None


walk("ConverseRequest")
conv["ConverseRequest"]["fields"].remove("modelId")  # in the URL
bedrock = {
    "reference": f"botocore {botocore.__version__},"
    " botocore/data/bedrock-runtime/2023-09-30/service-2.json (modelId is the URL's;"
    " Claude's own fields inside additionalModelRequestFields, a document, are the"
    " Messages API's)",
    "root": "ConverseRequest",
    "shapes": conv,
}
# Converse passes additionalModelRequestFields on to Claude: its `thinking` is Messages'.
bedrock["shapes"]["ConverseRequest"].setdefault("children", {})["additionalModelRequestFields"] = (
    "claude_fields"
)
bedrock["shapes"]["claude_fields"] = {
    "from": "Claude's own request fields (anthropic-sdk-python, above): thinking",
    "fields": ["thinking"],
    "children": {"thinking": "thinking"},
}
for name in ("thinking", "thinking_enabled", "thinking_adaptive", "thinking_disabled"):
    bedrock["shapes"][name] = anthropic["shapes"][name]

events_file = R + "response_stream_event.py"
ev_classes = classes(*OAI, events_file)["ResponseStreamEvent"]
names = re.findall(r"Response\w+Event|\w+Event", ev_classes)
event_types = {}
for cls in names:
    snake = re.sub(r"(?<!^)(?=[A-Z])", "_", cls).lower()
    path = R + snake + ".py"
    try:
        found = classes(*OAI, path)
    except subprocess.CalledProcessError:
        continue
    if cls in found and "type" in found[cls]:
        event_types[literal(found[cls]["type"])[0]] = f"{path}::{cls}"
out = {
    "about": (
        "The request fields and enum values each provider API takes, from its published"
        " SDK types or service model, pinned to a version: tests/test_wire_reference.py"
        " fails when relevo sends a field (or an enum value) that is not here. A shape's"
        " `fields` are the names it takes, `enums` the values a field takes, `children` the"
        " shape of a field's object (or of each item of its list); `by` picks a variant by"
        " a field's value, `values` are the strings a union takes in place of an object."
    ),
    "apis": {
        "openai": chat,
        "openai-responses": responses,
        "anthropic": anthropic,
        "vertex-anthropic": vertex_claude,
        "gemini": gemini,
        "vertex-google": vertex_gemini,
        "bedrock": bedrock,
    },
    "responses_events": {
        "reference": (
            f"openai/openai-python {OAI[1]} ({commit(*OAI)}), {events_file}::ResponseStreamEvent"
        ),
        "types": dict(sorted(event_types.items())),
    },
}
with open(sys.argv[4], "w", encoding="utf-8") as written:
    json.dump(out, written, indent=1)
    written.write("\n")
