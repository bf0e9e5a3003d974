"""What each provider API can carry of a turn's images and documents: a table.

A model may take images and PDFs (`[models] inputs`) and still be served by an API that
cannot carry a given one: no URL source, no attachment inside a tool result, a size or
count cap of its own. Capability fit reads this table before any call and skips such a
provider (`incapable`, naming what it cannot carry), so no part is dropped to make a
call fit, and a request the API would refuse (413, 400) is never sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

__all__ = ["WIRE_LIMITS", "WireLimits"]

_MB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class WireLimits:
    """One API's limits on attachments; None: no limit of its own."""

    image_url: bool = True  # an image given by URL (the provider fetches it)
    document_url: bool = True  # a document given by URL
    tool_result_attachments: bool = True  # images and documents inside a tool result
    max_image_bytes: int | None = None  # one image, decoded
    max_images: int | None = None  # in one request
    max_document_bytes: int | None = None  # one document, decoded
    max_documents: int | None = None  # in one request


WIRE_LIMITS: Mapping[str, WireLimits] = MappingProxyType(
    {
        # Chat Completions: images by URL or data URL; files (PDF) as base64 only; a tool
        # message carries text.
        "openai": WireLimits(
            document_url=False,
            tool_result_attachments=False,
            max_image_bytes=20 * _MB,
            max_images=500,
            max_document_bytes=32 * _MB,
        ),
        # Messages: base64 and URL sources for both; 5 MB an image, 100 images, 32 MB a
        # request (so a PDF), 100 PDF pages.
        "anthropic": WireLimits(
            max_image_bytes=5 * _MB, max_images=100, max_document_bytes=32 * _MB
        ),
        # generateContent ("File input methods", "Image understanding"): inline data up to
        # 100 MB of base64 a request (75 MB decoded), 50 MB a PDF; public https URLs the
        # API fetches; 3,600 images a request. Tool-result media go inside the
        # functionResponse (Gemini 3) or after it.
        "gemini": WireLimits(
            max_image_bytes=75 * _MB, max_images=3600, max_document_bytes=50 * _MB
        ),
        # One row for both publishers, the tighter of each. Gemini on Vertex (inference
        # reference, "Image understanding", "Document understanding"): 7 MB an inline
        # image, 50 MB a PDF, 900 files a prompt on Gemini 3 Pro; public https URLs too
        # (at most 10 images by URL, 15 MB a document by URL: not checkable here, relevo
        # never fetches). Claude on Vertex: Anthropic's 5 MB an image, 100 images, 32 MB.
        "vertex": WireLimits(
            max_image_bytes=5 * _MB,
            max_images=100,
            max_document_bytes=32 * _MB,
            max_documents=900,
        ),
        # Converse: bytes (or S3) only; 3.75 MB an image, 20 images; 4.5 MB a document, 5.
        "bedrock": WireLimits(
            image_url=False,
            document_url=False,
            max_image_bytes=3_750_000,
            max_images=20,
            max_document_bytes=4_500_000,
            max_documents=5,
        ),
    }
)
"""Per adapter kind (`ProviderSettings.kind`); a kind not listed has no limits of its own."""
