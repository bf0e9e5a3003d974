"""The simulated Gemini API and Vertex AI refuse what the real ones refuse, with their 400.

So a test of the adapter over the simulator proves the adapter never sends it. Each case
names where the refusal is documented: the APIs' protos (google.ai.generativelanguage.v1beta,
google.cloud.aiplatform.v1) for names and types, the guides for what a model takes.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from jsonschema import Draft202012Validator

from tests.test_vertex import jwt_grant
from worker.simulator import Simulator
from worker.simulator.json_answer import instance, mismatch

PNG = "iVBORw0KGgo="
TOOLS = [{"functionDeclarations": [{"name": "get_weather", "parameters": {"type": "object"}}]}]
VALID: dict[str, Any] = {
    "contents": [
        {
            "role": "user",
            "parts": [{"text": "Hi"}, {"inlineData": {"mimeType": "image/png", "data": PNG}}],
        }
    ],
    "generationConfig": {"maxOutputTokens": 50, "temperature": 0.5, "seed": 3},
}

Edit = Callable[[dict[str, Any]], None]


def first_part(body: dict[str, Any]) -> dict[str, Any]:
    part: dict[str, Any] = body["contents"][0]["parts"][1]
    return part


def config(body: dict[str, Any]) -> dict[str, Any]:
    settings: dict[str, Any] = body["generationConfig"]
    return settings


def with_tools(body: dict[str, Any], calling: dict[str, Any] | None = None) -> None:
    body["tools"] = TOOLS
    if calling is not None:
        body["toolConfig"] = {"functionCallingConfig": calling}


def json_beside_tools(body: dict[str, Any]) -> None:
    with_tools(body)
    config(body)["responseMimeType"] = "application/json"


def gs_file(body: dict[str, Any]) -> None:
    body["contents"][0]["parts"][1] = {"fileData": {"fileUri": "gs://b/o.png"}}


def multimodal_response(body: dict[str, Any]) -> None:
    body["contents"] = [
        {"role": "user", "parts": [{"text": "Weather?"}]},
        {
            "role": "model",
            "parts": [
                {
                    "functionCall": {"name": "get_weather", "args": {}},
                    "thoughtSignature": "skip_thought_signature_validator",
                }
            ],
        },
        {
            "role": "user",
            "parts": [
                {
                    "functionResponse": {
                        "name": "get_weather",
                        "response": {"content": "map"},
                        "parts": [{"inlineData": {"mimeType": "image/png", "data": PNG}}],
                    }
                }
            ],
        },
    ]
    body["tools"] = TOOLS


# (what to change, the model's family, a fragment of the API's message)
REFUSED: dict[str, tuple[Edit, str, str]] = {
    # GenerateContentRequest has no such field (the JSON parser's refusal).
    "unknown top-level field": (
        lambda b: b.update(parallel_tool_calls=False),
        "gemini-2.5-flash",
        'Unknown name "parallel_tool_calls": Cannot find field.',
    ),
    "unknown generation field": (
        lambda b: config(b).update(strict=True),
        "gemini-2.5-flash",
        "Unknown name \"strict\" at 'generation_config'",
    ),
    # Part, Blob (content.proto): one data field, base64 bytes, a supported MIME type.
    "part with no data": (
        lambda b: b["contents"][0]["parts"].append({"thought": True}),
        "gemini-2.5-flash",
        "required oneof field 'data' must have one initialized field",
    ),
    "part with two data fields": (
        lambda b: first_part(b).update(text="also"),
        "gemini-2.5-flash",
        "Oneof field 'data' is already set",
    ),
    "inline data not base64": (
        lambda b: first_part(b)["inlineData"].update(data="not base64!"),
        "gemini-2.5-flash",
        "Base64 decoding failed",
    ),
    "inline data without a MIME type": (
        lambda b: first_part(b)["inlineData"].pop("mimeType"),
        "gemini-2.5-flash",
        "mime_type",
    ),
    "a GIF": (
        lambda b: first_part(b)["inlineData"].update(mimeType="image/gif"),
        "gemini-2.5-flash",
        "Unsupported MIME type: image/gif",
    ),
    "file data that is no https URL": (
        gs_file,
        "gemini-2.5-flash",
        "Invalid file uri",
    ),
    # GenerationConfig.seed is an int32.
    "a seed wider than int32": (
        lambda b: config(b).update(seed=2**31),
        "gemini-2.5-flash",
        "Invalid value at 'generation_config.seed' (TYPE_INT32)",
    ),
    # ThinkingConfig ("Gemini thinking"): levels are Gemini 3's, 3 Pro takes LOW and HIGH,
    # a budget and a level together are refused.
    "a thinking level on Gemini 2.5": (
        lambda b: config(b).update(thinkingConfig={"thinkingLevel": "LOW"}),
        "gemini-2.5-pro",
        "Thinking level is not supported for this model.",
    ),
    "MEDIUM on Gemini 3 Pro": (
        lambda b: config(b).update(thinkingConfig={"thinkingLevel": "MEDIUM"}),
        "gemini-3-pro-preview",
        "Thinking level MEDIUM is not supported",
    ),
    "a budget and a level": (
        lambda b: config(b).update(thinkingConfig={"thinkingLevel": "LOW", "thinkingBudget": 1}),
        "gemini-3-flash",
        "either thinking budget or thinking level",
    ),
    # FunctionCallingConfig: allowedFunctionNames name declared functions, with ANY.
    "a forced function that is not declared": (
        lambda b: with_tools(b, {"mode": "ANY", "allowedFunctionNames": ["send_mail"]}),
        "gemini-2.5-flash",
        "'send_mail' is not the name of a declared function",
    ),
    "allowed names with AUTO": (
        lambda b: with_tools(b, {"mode": "AUTO", "allowedFunctionNames": ["get_weather"]}),
        "gemini-2.5-flash",
        "only allowed when the mode is ANY or VALIDATED",
    ),
    "a mode that is not one": (
        lambda b: with_tools(b, {"mode": "REQUIRED"}),
        "gemini-2.5-flash",
        "Invalid value at 'tool_config.function_calling_config.mode'",
    ),
    "a function name starting with a digit": (
        lambda b: b.update(tools=[{"functionDeclarations": [{"name": "3d_render"}]}]),
        "gemini-2.5-flash",
        "Invalid function name. Must start with a letter or an underscore.",
    ),
    # Gemini 2.x: no JSON response beside functions (python-genai#867), no media in a
    # function response ("Multimodal function responses": Gemini 3).
    "a JSON answer beside functions on Gemini 2.5": (
        json_beside_tools,
        "gemini-2.5-flash",
        "Function calling with a response mime type: 'application/json' is unsupported",
    ),
    "media in a function response on Gemini 2.5": (
        multimodal_response,
        "gemini-2.5-flash",
        "Multimodal function responses are not supported for this model.",
    ),
    "a schema without the JSON MIME type": (
        lambda b: config(b).update(responseJsonSchema={"type": "object"}),
        "gemini-3-flash",
        "response_mime_type",
    ),
}

ACCEPTED: dict[str, tuple[Edit, str]] = {
    "the valid body": (lambda b: None, "gemini-2.5-flash"),
    "a JSON answer beside functions on Gemini 3": (
        json_beside_tools,
        "gemini-3-flash",
    ),
    "media in a function response on Gemini 3": (multimodal_response, "gemini-3-flash"),
    "a thinking level on Gemini 3 Flash": (
        lambda b: config(b).update(thinkingConfig={"thinkingLevel": "MEDIUM"}),
        "gemini-3-flash",
    ),
    "a forced declared function": (
        lambda b: with_tools(b, {"mode": "ANY", "allowedFunctionNames": ["get_weather"]}),
        "gemini-2.5-flash",
    ),
}


@pytest.fixture
def http(sim: Simulator) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=sim.url, timeout=5, headers={"x-goog-api-key": "k"}) as client:
        yield client


def post(http: httpx.Client, family: str, edit: Edit) -> httpx.Response:
    body = copy.deepcopy(VALID)
    edit(body)
    model = f"{family}-t{uuid.uuid4().hex[:8]}"
    return http.post(f"/v1beta/models/{model}:generateContent", json=body)


@pytest.mark.parametrize("case", list(REFUSED))
def test_the_gemini_api_refuses_it_with_its_400(case: str, http: httpx.Client) -> None:
    edit, family, message = REFUSED[case]
    answer = post(http, family, edit)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["status"] == "INVALID_ARGUMENT"
    assert error["code"] == 400
    assert message in error["message"]


@pytest.mark.parametrize("case", list(ACCEPTED))
def test_the_gemini_api_takes_it(case: str, http: httpx.Client) -> None:
    edit, family = ACCEPTED[case]
    answer = post(http, family, edit)
    assert answer.status_code == 200, answer.text


def test_vertex_wants_a_mime_type_on_file_data_and_takes_gs_uris(sim: Simulator) -> None:
    """Vertex's FileData.mime_type is REQUIRED (aiplatform v1 content.proto); its fileUri
    may be a Cloud Storage URI ("inference reference": Cloud Storage bucket URI)."""
    model = f"gemini-2.5-pro-t{uuid.uuid4().hex[:8]}"
    path = f"/v1/projects/p/locations/us-east5/publishers/google/models/{model}:generateContent"
    with httpx.Client(base_url=sim.url, timeout=5) as client:
        token = client.post("/token", data=jwt_grant()).json()["access_token"]

        def send(file_data: dict[str, str]) -> httpx.Response:
            body = {"contents": [{"role": "user", "parts": [{"fileData": file_data}]}]}
            return client.post(path, json=body, headers={"authorization": f"Bearer {token}"})

        untyped = send({"fileUri": "https://example.com/a.png"})
        typed = send({"fileUri": "gs://bucket/a.png", "mimeType": "image/png"})
    assert untyped.status_code == 400
    assert untyped.json()["error"]["message"] == "Request contains an invalid argument."
    assert typed.status_code == 200, typed.text


SCHEMAS: list[dict[str, Any]] = [
    {"type": "object"},
    {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": False},
    {
        "type": "object",
        "properties": {
            "id": {"type": "integer", "minimum": 3},
            "tags": {"type": "array", "items": {"type": "string", "minLength": 2}, "minItems": 2},
            "kind": {"enum": ["a", "b"]},
            "score": {"type": ["number", "null"], "exclusiveMinimum": 0},
            "ok": {"type": "boolean"},
            "owner": {"$ref": "#/$defs/person"},
            "either": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
            "fixed": {"const": 4},
        },
        "required": ["id", "tags", "kind", "score", "ok", "owner", "either", "fixed"],
        "$defs": {
            "person": {"type": "object", "properties": {"n": {"type": "string"}}, "required": ["n"]}
        },
    },
    {"type": "array", "items": {"type": "integer"}, "minItems": 1},
]


@pytest.mark.parametrize("schema", SCHEMAS)
def test_the_simulated_json_answer_fits_its_schema_unless_told_otherwise(
    schema: dict[str, Any],
) -> None:
    """The answer to a request for JSON: a valid instance, or (`invalid_output`) none."""
    validator = Draft202012Validator(schema)
    assert validator.is_valid(instance(schema))
    assert not validator.is_valid(mismatch(schema))
