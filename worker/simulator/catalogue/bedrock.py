"""AWS Bedrock (bedrock-runtime Converse and ConverseStream) error responses.

Sources: botocore's bedrock-runtime service model (each exception's status and
documentation) and the "Troubleshooting Amazon Bedrock API Error Codes" page; the
`x-amzn-ErrorType` header and throttling body quoted in
aws-samples/amazon-bedrock-client-for-mac#99; "Too many tokens per day" in
minorun365/agent-book#29; "Bedrock is unable to process your request." in
darko-mesaros/bedrust#47; "Input is too long for requested model." (a mid-stream
validationException) in aws-samples/bedrock-chat#95; "The model returned the following
errors: prompt is too long" in aaif-goose/goose#7442; end-of-life and legacy-model
ResourceNotFoundExceptions in langchain-ai/langchain-aws#1245 and awslabs/llmeter#35;
UnrecognizedClientException in vercel/ai#4163; an empty message's ValidationException in
anthropics/claude-code#13709; AccessDeniedException in andrewyng/aisuite#174; "The
provided model identifier is invalid." in strands-agents/harness-sdk#38; a model that
needs an inference profile, "Invocation of model ID ... with on-demand throughput isn't
supported. Retry your request with the ID or ARN of an inference profile that contains
this model." (with a typographic apostrophe; from Converse and ConverseStream in
terricain/aioboto3#352 and aws-samples/sample-getting-started-with-strands-agents-course#1)
and its older wording "The provided model doesn't support on-demand throughput."
(aws-samples/bedrock-chat#508). Body: `{"message"}`, the exception's name in the header;
mid-stream, an event-stream message of type `exception` named by `:exception-type` (here
`{"throttlingException": {...}}`). A `modelStreamErrorException` relays the model's own
error in the fields of botocore's shape, `message`, `originalStatusCode` and
`originalMessage`; the overflow's words are those of continuedev/continue#6005 ("Error
processing Bedrock stream: The model returned the following errors: Input is too long for
requested model.").
"""

from __future__ import annotations

from worker.simulator.catalogue.shapes import (
    JSON,
    CannedError,
    StreamPayload,
)

__all__ = ["ERRORS", "STREAM"]

_BEDROCK_LIMIT = "Your request exceeds the service quota for your account. You can view your "


def _bedrock(status: int, exception: str, message: str) -> CannedError:
    headers = {
        **JSON,
        "x-amzn-ErrorType": f"{exception}:http://internal.amazon.com/coral/com.amazon.bedrock/",
        "x-amzn-RequestId": "ca47a5ce-e260-4824-aa0e-2e62669d5d6e",
    }
    return CannedError(status, {"message": message}, headers)


ERRORS: dict[str, CannedError] = {
    "throttling_tokens": _bedrock(
        429, "ThrottlingException", "Too many tokens, please wait before trying again."
    ),
    "throttling_requests": _bedrock(
        429, "ThrottlingException", "Too many requests, please wait before trying again."
    ),
    "tokens_per_day": _bedrock(
        429, "ThrottlingException", "Too many tokens per day, please wait before trying again."
    ),
    "service_quota_exceeded": _bedrock(
        400,
        "ServiceQuotaExceededException",
        _BEDROCK_LIMIT + "quotas at Viewing service quotas. You can resubmit your request later.",
    ),
    "service_unavailable": _bedrock(
        503, "ServiceUnavailableException", "Bedrock is unable to process your request."
    ),
    "model_not_ready": _bedrock(
        429,
        "ModelNotReadyException",
        "The model specified in the request is not ready to serve inference requests.",
    ),
    "model_timeout": _bedrock(
        408,
        "ModelTimeoutException",
        "The request took too long to process. Processing time exceeded the model timeout length.",
    ),
    "internal_server": _bedrock(
        500, "InternalServerException", "The request processing has failed due to a server error"
    ),
    "model_error": _bedrock(
        424, "ModelErrorException", "The request failed due to an error while processing the model."
    ),
    "validation": _bedrock(
        400,
        "ValidationException",
        "The content field in the Message object at messages.46 is empty. Add a ContentBlock "
        "object to the content field and try again.",
    ),
    "input_too_long": _bedrock(
        400, "ValidationException", "Input is too long for requested model."
    ),
    "prompt_too_long": _bedrock(
        400,
        "ValidationException",
        "The model returned the following errors: prompt is too long: 227255 tokens > 200000 "
        "maximum",
    ),
    "access_denied": _bedrock(
        403,
        "AccessDeniedException",
        "You don't have access to the model with the specified model ID.",
    ),
    "unrecognized_client": _bedrock(
        403,
        "UnrecognizedClientException",
        "The security token included in the request is invalid.",
    ),
    "invalid_model_id": _bedrock(
        400, "ValidationException", "The provided model identifier is invalid."
    ),
    "end_of_life": _bedrock(
        404,
        "ResourceNotFoundException",
        "This model version has reached the end of its life. Please refer to the AWS "
        "documentation for more details.",
    ),
    "legacy_model": _bedrock(
        404,
        "ResourceNotFoundException",
        "Access denied. This Model is marked by provider as Legacy and you have not been "
        "actively using the model in the last 30 days. Please upgrade to an active model on "
        "Amazon Bedrock",
    ),
    "on_demand_unsupported": _bedrock(
        400,
        "ValidationException",
        "Invocation of model ID anthropic.claude-3-5-sonnet-20241022-v2:0 with on-demand "
        "throughput isn’t supported. Retry your request with the ID or ARN of an inference "
        "profile that contains this model.",
    ),
    "on_demand_not_supported": _bedrock(
        400, "ValidationException", "The provided model doesn't support on-demand throughput."
    ),
}

STREAM: dict[str, StreamPayload] = {
    "model_stream_error": {
        "modelStreamErrorException": {
            "message": "An error occurred while streaming the response. Retry your request.",
            "originalStatusCode": 500,
        }
    },
    "model_stream_context_too_long": {
        "modelStreamErrorException": {
            "message": "The model returned the following errors: Input is too long for "
            "requested model.",
            "originalStatusCode": 400,
            "originalMessage": "Input is too long for requested model.",
        }
    },
    "throttling": {
        "throttlingException": {"message": "Too many tokens, please wait before trying again."}
    },
    "input_too_long": {
        "validationException": {"message": "Input is too long for requested model."}
    },
    "service_unavailable": {
        "serviceUnavailableException": {"message": "Bedrock is unable to process your request."}
    },
}
