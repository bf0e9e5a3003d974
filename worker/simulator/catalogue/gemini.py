"""Google Gemini API error responses, and the google.rpc.Status they share with Vertex AI.

Sources: the Gemini API "Troubleshooting" page (HTTP code / status table: INVALID_ARGUMENT,
FAILED_PRECONDITION, PERMISSION_DENIED, NOT_FOUND, RESOURCE_EXHAUSTED, INTERNAL,
UNAVAILABLE, DEADLINE_EXCEEDED), the invalid key body with `google.rpc.ErrorInfo` reason
API_KEY_INVALID, and 429 bodies with `google.rpc.QuotaFailure` and `google.rpc.RetryInfo`
(`retryDelay`) quoted in google-gemini/gemini-cli issues. Body: `{"error": {"code",
"message", "status", "details"}}`; mid-stream (`alt=sse`) the same object arrives as a
`data:` line. A per-day quota: the `QuotaFailure` with quotaId
`GenerateRequestsPerDayPerProjectPerModel-FreeTier` (and a RetryInfo of seconds) quoted in
googleapis/python-genai issue 2044; per-day quotas reset at midnight Pacific time (Gemini
API "Rate limits" page). Google also sends a Status in a one-element list, as
streamGenerateContent?alt=sse did with 429 "Resource exhausted. Please try again later."
in google-gemini/gemini-cli#6454; mid-stream that list is the `data:` line.
"""

from __future__ import annotations

from typing import Any

from worker.simulator.catalogue.shapes import CannedError, StreamPayload

__all__ = ["ERRORS", "RPC", "STREAM", "google_error", "google_status"]

RPC = "type.googleapis.com/google.rpc."
"""The prefix of every google.rpc detail's `@type`."""

_GOOGLE_JSON = {"content-type": "application/json; charset=UTF-8"}


def google_error(status: int, grpc: str, message: str, *details: dict[str, Any]) -> CannedError:
    """A google.rpc.Status error: `{"error": {"code", "message", "status", "details"}}`."""
    error: dict[str, Any] = {"code": status, "message": message, "status": grpc}
    if details:
        error["details"] = list(details)
    return CannedError(status, {"error": error}, dict(_GOOGLE_JSON))


def google_status(body: object) -> dict[str, Any] | None:
    """The google.rpc.Status object in `body`, if it is one (alone or in a list)."""
    if isinstance(body, list) and body:
        body = body[0]
    error = body.get("error") if isinstance(body, dict) else None
    return error if isinstance(error, dict) and "status" in error else None


def _quota_failure(*quota_ids: str, value: str | None = None) -> dict[str, Any]:
    """A `google.rpc.QuotaFailure` detail naming the spent quotas of gemini-2.0-flash."""
    violations: list[dict[str, Any]] = []
    for quota_id in quota_ids:
        violation: dict[str, Any] = {
            "quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests",
            "quotaId": quota_id,
            "quotaDimensions": {"location": "global", "model": "gemini-2.0-flash"},
        }
        if value is not None:
            violation["quotaValue"] = value
        violations.append(violation)
    return {"@type": RPC + "QuotaFailure", "violations": violations}


_PER_MINUTE = "GenerateRequestsPerMinutePerProjectPerModel-FreeTier"
_GEMINI_QUOTA = _quota_failure(_PER_MINUTE, value="15")
_GEMINI_DAILY = _quota_failure("GenerateRequestsPerDayPerProjectPerModel-FreeTier", _PER_MINUTE)
_GEMINI_QUOTA_MSG = (
    "You exceeded your current quota, please check your plan and billing details. For more "
    "information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits."
)
_GEMINI_HELP = {
    "@type": RPC + "Help",
    "links": [
        {
            "description": "Learn more about Gemini API quotas",
            "url": "https://ai.google.dev/gemini-api/docs/rate-limits",
        }
    ],
}
_GEMINI_KEY = {
    "@type": RPC + "ErrorInfo",
    "reason": "API_KEY_INVALID",
    "domain": "googleapis.com",
    "metadata": {"service": "generativelanguage.googleapis.com"},
}
_KEY_MSG = "API key not valid. Please pass a valid API key."

ERRORS: dict[str, CannedError] = {
    "resource_exhausted": google_error(
        429,
        "RESOURCE_EXHAUSTED",
        _GEMINI_QUOTA_MSG,
        _GEMINI_QUOTA,
        _GEMINI_HELP,
        {"@type": RPC + "RetryInfo", "retryDelay": "27s"},
    ),
    "daily_quota_exhausted": google_error(
        429,
        "RESOURCE_EXHAUSTED",
        _GEMINI_QUOTA_MSG,
        _GEMINI_HELP,
        _GEMINI_DAILY,
        {"@type": RPC + "RetryInfo", "retryDelay": "47s"},
    ),
    "quota_billing": google_error(429, "RESOURCE_EXHAUSTED", _GEMINI_QUOTA_MSG),
    "resource_exhausted_bare": google_error(
        429, "RESOURCE_EXHAUSTED", "Resource has been exhausted (e.g. check quota)."
    ),
    "unavailable": google_error(
        503, "UNAVAILABLE", "The model is overloaded. Please try again later."
    ),
    "internal": google_error(
        500,
        "INTERNAL",
        "An internal error has occurred. Please retry or report in "
        "https://developers.generativeai.google/guide/troubleshooting",
    ),
    "invalid_argument": google_error(
        400,
        "INVALID_ARGUMENT",
        "Invalid JSON payload received. Unknown name \"foo\" at 'generation_config': "
        "Cannot find field.",
    ),
    "api_key_invalid": google_error(
        400,
        "INVALID_ARGUMENT",
        _KEY_MSG,
        _GEMINI_KEY,
        {"@type": RPC + "LocalizedMessage", "locale": "en-US", "message": _KEY_MSG},
    ),
    "context_too_long": google_error(
        400,
        "INVALID_ARGUMENT",
        "The input token count (1200293) exceeds the maximum number of tokens allowed (1048576).",
    ),
    "failed_precondition": google_error(
        400,
        "FAILED_PRECONDITION",
        "Gemini API free tier is not available in your country. Please enable billing on "
        "your project in Google AI Studio.",
    ),
    "permission_denied": google_error(
        403, "PERMISSION_DENIED", "The caller does not have permission"
    ),
    "not_found": google_error(
        404,
        "NOT_FOUND",
        "models/gemini-9 is not found for API version v1beta, or is not supported for "
        "generateContent. Call ListModels to see the list of available models and their "
        "supported methods.",
    ),
    "deadline_exceeded": google_error(
        504, "DEADLINE_EXCEEDED", "Deadline expired before operation could complete."
    ),
}

STREAM: dict[str, StreamPayload] = {
    "unavailable": {
        "error": {
            "code": 503,
            "message": "The model is overloaded. Please try again later.",
            "status": "UNAVAILABLE",
        }
    },
    "internal": {
        "error": {
            "code": 500,
            "message": "An internal error has occurred.",
            "status": "INTERNAL",
        }
    },
    "resource_exhausted_listed": [
        {
            "error": {
                "code": 429,
                "message": "Resource exhausted. Please try again later. Please refer to "
                "https://cloud.google.com/vertex-ai/generative-ai/docs/error-code-429 for more "
                "details.",
                "status": "RESOURCE_EXHAUSTED",
            }
        }
    ],
}
