"""Google Vertex AI error responses: its own google.rpc.Status, and Claude's as it relays them.

Sources: the "API errors" page of Vertex's generative AI docs (400 INVALID_ARGUMENT /
FAILED_PRECONDITION, 403, 404, 429 RESOURCE_EXHAUSTED, 500, 503, 504) and bodies quoted in
public issues: 429 "Resource exhausted ... error-code-429" (google-gemini/gemini-cli
#14811), Claude's per-base-model quotas "Quota exceeded for aiplatform.googleapis.com/
online_prediction_requests_per_base_model" (cline/cline #651) and "..._input_tokens_
per_minute_per_base_model" (anthropics/claude-code #1440), 404 "Publisher Model ... was
not found or your project does not have access to it" (genkit-ai/genkit #4688), 400
FAILED_PRECONDITION "Project ... is not allowed to use Publisher Model" (yym68686/uni-api
#41), 403 IAM_PERMISSION_DENIED on aiplatform.endpoints.predict (rpurinton/gemini-php #4),
401 UNAUTHENTICATED with ACCESS_TOKEN_EXPIRED (googleapis/python-api-core #384) or
CREDENTIALS_MISSING (a2aproject/a2a-samples #43), the context-window wordings "input token
count exceeds the maximum number of tokens allowed" (warpdotdev/warp #15662) and "input
token count is N but model only supports up to M" (gemini-cli #19727), and Claude's own
Anthropic-shaped overloaded_error with `details: null` as Vertex relays it
(langgenius/dify #7122). Vertex often wraps the Status in a one-element list, as quoted.
"""

from __future__ import annotations

from worker.simulator.catalogue.gemini import RPC, google_error
from worker.simulator.catalogue.shapes import (
    JSON,
    CannedError,
    StreamPayload,
)

__all__ = ["ERRORS", "STREAM"]

_VERTEX_AUTH = (
    "Expected OAuth 2 access token, login cookie or other valid authentication credential. "
    "See https://developers.google.com/identity/sign-in/web/devconsole-project."
)
_VERTEX_TOKEN_EXPIRED = {
    "@type": RPC + "ErrorInfo",
    "reason": "ACCESS_TOKEN_EXPIRED",
    "domain": "googleapis.com",
    "metadata": {
        "service": "aiplatform.googleapis.com",
        "method": "google.cloud.aiplatform.v1.PredictionService.GenerateContent",
    },
}
_VERTEX_QUOTA = (
    "Quota exceeded for aiplatform.googleapis.com/{metric} with base model: {model}. Please "
    "submit a quota increase request. "
    "https://cloud.google.com/vertex-ai/docs/generative-ai/quotas-genai."
)
_MODEL_PATH = "projects/my-project/locations/us-east5/publishers"


def _listed(error: CannedError) -> CannedError:
    """`error` with its body in a one-element list, as Vertex AI often sends it."""
    return CannedError(error.status, [error.body], error.headers)


def _claude_on_vertex(status: int, type_: str, message: str) -> CannedError:
    body = {"type": "error", "error": {"details": None, "type": type_, "message": message}}
    return CannedError(status, body, dict(JSON))


ERRORS: dict[str, CannedError] = {
    "resource_exhausted": _listed(
        google_error(
            429,
            "RESOURCE_EXHAUSTED",
            "Resource exhausted. Please try again later. Please refer to "
            "https://cloud.google.com/vertex-ai/generative-ai/docs/error-code-429 for more "
            "details.",
        )
    ),
    "claude_request_quota": _listed(
        google_error(
            429,
            "RESOURCE_EXHAUSTED",
            _VERTEX_QUOTA.format(
                metric="online_prediction_requests_per_base_model",
                model="anthropic-claude-3-5-sonnet-v2",
            ),
        )
    ),
    "claude_token_quota": google_error(
        429,
        "RESOURCE_EXHAUSTED",
        _VERTEX_QUOTA.format(
            metric="online_prediction_input_tokens_per_minute_per_base_model",
            model="anthropic-claude-opus-4",
        ),
    ),
    "model_not_found": google_error(
        404,
        "NOT_FOUND",
        f"Publisher Model `{_MODEL_PATH}/google/models/gemini-9` was not found or your "
        "project does not have access to it. Please ensure you are using a valid model "
        "version. For more information, see: "
        "https://cloud.google.com/vertex-ai/generative-ai/docs/learn/model-versions",
    ),
    "model_not_allowed": _listed(
        google_error(
            400,
            "FAILED_PRECONDITION",
            "Project `my-project` is not allowed to use Publisher Model "
            f"`{_MODEL_PATH}/anthropic/models/claude-3-sonnet@20240229`",
        )
    ),
    "permission_denied": google_error(
        403,
        "PERMISSION_DENIED",
        "Permission 'aiplatform.endpoints.predict' denied on resource "
        f"'//aiplatform.googleapis.com/{_MODEL_PATH}/google/models/gemini-2.5-pro' "
        "(or it may not exist).",
        {
            "@type": RPC + "ErrorInfo",
            "reason": "IAM_PERMISSION_DENIED",
            "domain": "aiplatform.googleapis.com",
            "metadata": {"permission": "aiplatform.endpoints.predict"},
        },
    ),
    "access_token_expired": google_error(
        401,
        "UNAUTHENTICATED",
        f"Request had invalid authentication credentials. {_VERTEX_AUTH}",
        _VERTEX_TOKEN_EXPIRED,
    ),
    "credentials_missing": google_error(
        401,
        "UNAUTHENTICATED",
        f"Request is missing required authentication credential. {_VERTEX_AUTH}",
        {**_VERTEX_TOKEN_EXPIRED, "reason": "CREDENTIALS_MISSING"},
    ),
    "invalid_credentials": google_error(
        401,
        "UNAUTHENTICATED",
        f"Request had invalid authentication credentials. {_VERTEX_AUTH}",
    ),
    "invalid_argument": google_error(
        400, "INVALID_ARGUMENT", "Request contains an invalid argument."
    ),
    "context_too_long": google_error(
        400,
        "INVALID_ARGUMENT",
        "The input token count exceeds the maximum number of tokens allowed 1048576.",
    ),
    "context_too_long_unable": google_error(
        400,
        "INVALID_ARGUMENT",
        "Unable to submit request because the input token count is 1251952 but model only "
        "supports up to 1048576. Reduce the input token count and try again. You can also "
        "use the CountTokens API to calculate prompt token count and billable characters. "
        "Learn more: https://cloud.google.com/vertex-ai/generative-ai/docs/learn/models",
    ),
    "internal": google_error(500, "INTERNAL", "Internal error encountered."),
    "unavailable": google_error(503, "UNAVAILABLE", "The service is currently unavailable."),
    "deadline_exceeded": google_error(
        504, "DEADLINE_EXCEEDED", "Deadline expired before operation could complete."
    ),
    "claude_overloaded": _claude_on_vertex(529, "overloaded_error", "Overloaded"),
    "claude_prompt_too_long": _claude_on_vertex(
        400, "invalid_request_error", "prompt is too long: 208310 tokens > 200000 maximum"
    ),
    "claude_invalid_request": _claude_on_vertex(
        400,
        "invalid_request_error",
        'messages: roles must alternate between "user" and "assistant", but found '
        'multiple "user" roles in a row',
    ),
}

STREAM: dict[str, StreamPayload] = {
    "unavailable": {
        "error": {
            "code": 503,
            "message": "The service is currently unavailable.",
            "status": "UNAVAILABLE",
        }
    },
    "claude_overloaded": {
        "type": "error",
        "error": {"details": None, "type": "overloaded_error", "message": "Overloaded"},
    },
}
