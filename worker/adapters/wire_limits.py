"""What each provider API can carry of a turn: a table.

A model may take images and PDFs (`[models] inputs`) and still be served by an API that
cannot carry a given one: no URL source, no attachment inside a tool result, a size or
count cap of its own, an image format it does not take; or a field value the API has no
room for (a `tool_choice` of "none", a temperature over its range). Capability fit reads
this table before any call and skips such a provider (`incapable`, naming what it cannot
carry), so nothing is dropped to make a call fit, and a request the API would refuse
(413, 400), or the adapter would refuse to build, is never sent.
"""

from __future__ import annotations

import mimetypes
from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from urllib.parse import urlsplit

from worker.types import ImagePart

__all__ = [
    "GEMINI_IMAGE_TYPES",
    "WIRE_LIMITS",
    "WireLimits",
    "converse_tool_family",
    "image_type",
    "limits_for",
]

_MB = 1024 * 1024

# "Image understanding" (Gemini API and Vertex AI): PNG, JPEG, WEBP, HEIC, HEIF; no GIF.
GEMINI_IMAGE_TYPES = frozenset(
    {"image/png", "image/jpeg", "image/webp", "image/heic", "image/heif"}
)


@dataclass(frozen=True, slots=True)
class WireLimits:
    """One API's limits on what a turn carries; None: no limit of its own."""

    image_url: bool = True  # an image given by URL (the provider fetches it)
    document_url: bool = True  # a document given by URL
    tool_result_attachments: bool = True  # images and documents inside a tool result
    image_types: frozenset[str] | None = None  # the image formats it takes; None: all relevo's
    image_url_typed: bool = False  # an image by URL must say its type (`image_type`)
    max_image_bytes: int | None = None  # one image, decoded
    max_images: int | None = None  # in one request
    max_document_bytes: int | None = None  # one document, decoded
    max_documents: int | None = None  # in one request
    document_needs_text: bool = False  # a message with a document must have text too
    tool_choice_none: bool = True  # tools may be offered with tool_choice "none"
    max_temperature: float | None = None  # the top of its temperature range
    temperature_with_top_p: bool = True  # both sampling fields in one request
    min_max_tokens: int = 1  # the smallest output limit it takes
    tool_name_letter_first: bool = False  # a tool's name starts with a letter or "_"
    named_tool_choice: bool = True  # tool_choice {"name": ...}


WIRE_LIMITS: Mapping[str, WireLimits] = MappingProxyType(
    {
        # Chat Completions (OpenAI's API reference and its "Images and vision" and "File
        # inputs" guides): images by URL or data URL, 20 MB an image, 500 a request;
        # PDFs as base64 `file_data` only ("External file URL: not supported"), 32 MB of
        # files a request; a tool message takes text parts only. Azure OpenAI the same.
        "openai": WireLimits(
            document_url=False,
            tool_result_attachments=False,
            max_image_bytes=20 * _MB,
            max_images=500,
            max_document_bytes=32 * _MB,
        ),
        # The Responses API ("File inputs", "Images and vision", the API reference's
        # function_call_output): images by URL or data URL, PDFs as `file_data` or by
        # `file_url`; a tool result's output may be a list of input_text, input_image
        # and input_file parts; the same 20 MB an image, 500 images, 32 MB of files.
        # `max_output_tokens` is at least 16 ("integer below minimum value").
        "openai-responses": WireLimits(
            max_image_bytes=20 * _MB,
            max_images=500,
            max_document_bytes=32 * _MB,
            min_max_tokens=16,
        ),
        # Messages (platform.claude.com/docs/en/build-with-claude/vision, .../pdf-support):
        # base64 and URL sources for both, in tool results too; an image's base64 at most
        # 5 MB (3.75 MB decoded), 100 images a request (600 past a 200k window), 32 MB a
        # request, so a PDF's base64 too (24 MB decoded); 100 PDF pages (not counted here).
        "anthropic": WireLimits(
            max_image_bytes=5 * _MB * 3 // 4,
            max_images=100,
            max_document_bytes=32 * _MB * 3 // 4,
            max_temperature=1.0,
            temperature_with_top_p=False,  # Claude 4 and later refuse both
        ),
        # generateContent ("File input methods", "Image understanding"): inline data up to
        # 100 MB of base64 a request (75 MB decoded), 50 MB a PDF (read as base64 too, to
        # be safe); public https URLs the API fetches; 3,600 images a request; media in
        # tool results (inside the functionResponse on Gemini 3, after it before).
        "gemini": WireLimits(
            image_types=GEMINI_IMAGE_TYPES,
            max_image_bytes=100 * _MB * 3 // 4,
            max_images=3600,
            max_document_bytes=50 * _MB * 3 // 4,
            # FunctionDeclaration.name: "Must start with a letter or an underscore".
            tool_name_letter_first=True,
        ),
        # Vertex AI: Google's publisher (inference reference, "Image understanding",
        # "Document understanding"): 7 MB an inline image and 50 MB a PDF (read as base64,
        # to be safe), 900 images and 900 files a prompt (Gemini 3 Pro; 3,000 before);
        # public https URLs too, at most 10 images by URL and 15 MB a document by URL (not
        # checkable here: relevo never fetches). Anthropic's (rawPredict) takes base64
        # sources only, and Claude's own limits.
        "vertex:google": WireLimits(
            image_types=GEMINI_IMAGE_TYPES,
            image_url_typed=True,  # fileData.mimeType is required
            max_image_bytes=7 * _MB * 3 // 4,
            max_images=900,
            max_document_bytes=50 * _MB * 3 // 4,
            max_documents=900,
            tool_name_letter_first=True,
        ),
        "vertex:anthropic": WireLimits(
            image_url=False,
            document_url=False,
            max_image_bytes=5 * _MB * 3 // 4,
            max_images=100,
            max_document_bytes=32 * _MB * 3 // 4,
            max_temperature=1.0,
            temperature_with_top_p=False,
        ),
        # Converse (Bedrock Runtime API reference: Message.content, ImageSource,
        # DocumentSource, ToolResultContentBlock): bytes (or S3) only, no URL; 3.75 MB and
        # 8000 x 8000 px an image, 20 images; 4.5 MB a document, 5; both in tool results.
        "bedrock": WireLimits(
            image_url=False,
            document_url=False,
            max_image_bytes=3_750_000,
            max_images=20,
            max_document_bytes=4_500_000,
            max_documents=5,
            document_needs_text=True,  # a document block needs a text block beside it
            tool_choice_none=False,  # ToolChoice is auto, any or tool
            max_temperature=1.0,  # InferenceConfiguration.temperature: 0 to 1
            temperature_with_top_p=False,  # Claude 4 and later refuse both
        ),
    }
)
"""Per provider API (`ProviderSettings.wire`), Vertex AI per publisher (`limits_for`); a
API not listed has no limits of its own."""
# SpecificToolChoice and ToolResultBlock.status: "only supported by Anthropic Claude 3 and
# Amazon Nova models" (status: "Amazon Nova and Anthropic Claude 3 and 4"); relevo takes
# every Claude for one that does (the later ones take both on Anthropic's own API).
_CONVERSE_TOOL_FAMILIES = ("anthropic.", "amazon.nova")
_BEDROCK_OTHERS = replace(WIRE_LIMITS["bedrock"], named_tool_choice=False)


def limits_for(wire: str, model_id: str) -> WireLimits | None:
    """The limits of the API `wire` for `model_id`."""
    if wire == "vertex":
        # As the Vertex adapter chooses its publisher: Claude ids are Anthropic's.
        wire = "vertex:anthropic" if model_id.startswith("claude-") else "vertex:google"
    if wire == "bedrock" and not converse_tool_family(model_id):
        return _BEDROCK_OTHERS
    return WIRE_LIMITS.get(wire)


def converse_tool_family(model_id: str) -> bool:
    """Whether the Bedrock model `model_id` (an id or inference profile) is one of the
    families Converse gives a specific tool choice and a tool result's status: Claude, Nova."""
    return any(family in model_id for family in _CONVERSE_TOOL_FAMILIES)


def image_type(part: ImagePart) -> str | None:
    """An image's media type: its `media_type`, or for one by URL the image type its URL's
    path names (`.png`); None when neither says (relevo never fetches the URL to look)."""
    if part.media_type is not None or part.url is None:
        return part.media_type
    guessed, _ = mimetypes.guess_type(urlsplit(part.url).path)
    return guessed if guessed is not None and guessed.startswith("image/") else None
