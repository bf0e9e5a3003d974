"""What an image or a PDF adds to a prompt, per vendor, as each vendor documents it.

A vendor bills an attachment by its size, not its bytes: an image by its pixels after
its own resizing, a PDF by its pages (each page's text and an image of it). So relevo
reads an image's width and height from its header (Pillow, which opens an image without
decoding its pixels) and counts a PDF's pages (pypdf, whose page-tree walk has limits of
its own), once per part. An attachment that cannot be measured (a URL, which relevo
never fetches; data that does not parse) counts as the largest its vendor takes. Where
one vendor's models count differently, the formula is the largest of them, so the count
bounds every model of the vendor; docs/budgets.md gives each formula and its source.
"""

from __future__ import annotations

import binascii
import io
import math
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from functools import lru_cache
from types import MappingProxyType
from typing import TYPE_CHECKING

from worker.types import DocumentPart, ImagePart

if TYPE_CHECKING:
    from PIL.ImageFile import ImageFile

__all__ = [
    "TOKENS_PER_ATTACHMENT",
    "VENDORS",
    "MediaRule",
    "VendorMedia",
    "anthropic_image_tokens",
    "gemini_image_tokens",
    "media_rule",
    "openai_image_tokens",
]

# The block around an attachment (a content part's type, its source, a file name's
# label): Anthropic adds 3 or 4 tokens an image block, OpenAI a few an image part.
TOKENS_PER_ATTACHMENT = 16


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def openai_image_tokens(width: int, height: int) -> int:
    """OpenAI, detail `high` or `auto` (relevo sends no `detail`), at a multiple of one.

    The larger of its two documented schemes: tiles (GPT-4o, GPT-4.1 and GPT-4.5 at 85
    and 170; the o-series and GPT-5 count less) and 32-pixel patches up to the largest
    budget (2,500, GPT-5.4 and later; 1,536 for the others). Models that bill images at
    a multiple of this (gpt-4o-mini, the mini and nano models) set
    `image_token_multiplier`.
    """
    return max(openai_tile_tokens(width, height), openai_patch_tokens(width, height))


def openai_tile_tokens(width: int, height: int, *, base: int = 85, tile: int = 170) -> int:
    """Fit in 2048 x 2048, scale the shortest side down to 768, then `base` tokens plus
    `tile` a 512-pixel tile."""
    w, h = Fraction(width), Fraction(height)
    fit = min(Fraction(1), Fraction(2048) / max(w, h))
    w, h = w * fit, h * fit
    short = min(w, h)
    if short > 768:
        w, h = w * 768 / short, h * 768 / short
    return base + tile * math.ceil(w / 512) * math.ceil(h / 512)


def openai_patch_tokens(width: int, height: int, *, budget: int = 2500) -> int:
    """The 32-pixel patches that cover the image, at most `budget`: OpenAI shrinks a
    larger image until it fits the budget, which never counts more."""
    return min(_ceil_div(width, 32) * _ceil_div(height, 32), budget)


def anthropic_image_tokens(
    width: int, height: int, *, long_edge: int = 2576, pixels: int = 2576 * 1456
) -> int:
    """Anthropic: resized within `long_edge` and `pixels`, then the larger of width x
    height / 750 and its 28-pixel patches (the image padded to a multiple of 28).

    The default limits are the largest any Claude model keeps (Opus 4.7: 2,576 pixels a
    side, 3.75 megapixels); earlier models keep 1,568 and 1.15 megapixels, fewer tokens.
    """
    scale = min(1.0, long_edge / max(width, height), math.sqrt(pixels / (width * height)))
    # Rounded up, so a resized side never counts a pixel short.
    w, h = math.ceil(width * scale), math.ceil(height * scale)
    return max(_ceil_div(w * h, 750), _ceil_div(w, 28) * _ceil_div(h, 28))


def _anthropic_most(*, long_edge: int = 2576, pixels: int = 2576 * 1456) -> int:
    # What `anthropic_image_tokens` counts at most: its sides, each rounded up a pixel at
    # most, add up to at most long_edge + pixels / long_edge (+ 2).
    sides = long_edge + _ceil_div(pixels, long_edge) + 2
    area = _ceil_div(pixels + sides + 1, 750)
    patches = (pixels + 28 * sides + 28 * 28 * 2) // (28 * 28) + 1
    return max(area, patches)


def gemini_image_tokens(width: int, height: int) -> int:
    """Gemini: 258 tokens an image up to 384 pixels a side, else 258 a 768-pixel tile
    (Gemini 2); Gemini 3 counts an image at most 1,120 (its default resolution, high)."""
    tiles = 1 if width <= 384 and height <= 384 else _ceil_div(width, 768) * _ceil_div(height, 768)
    return max(258 * tiles, 1120)


@dataclass(frozen=True, slots=True)
class VendorMedia:
    """How one vendor counts attachments: a table row, from its documentation."""

    image: Callable[[int, int], int]  # an image of width x height pixels
    largest_image: int  # an image of unknown size: the most `image` counts one
    page_text: int  # the text of one PDF page
    page_image: int  # the image of one PDF page
    max_pages: int  # the most pages one request may carry: a longer PDF is refused
    multiplier: Fraction  # the largest multiple of `image` its models bill


# Unknown size: an image as large as one Anthropic takes (8,000 pixels a side); Google
# documents no largest.
_LARGEST_SIDE = 8000
# Anthropic's upper figure for a page's text ("1,500-3,000 tokens per page"); OpenAI
# extracts a page's text too, and gives no figure.
_PAGE_TEXT = 3000

VENDORS: Mapping[str, VendorMedia] = MappingProxyType(
    {
        # A PDF: each page's text and an image of it; 100 pages a request. gpt-4o-mini
        # bills images at 33.34 times (2,833 + 5,667 a tile).
        "openai": VendorMedia(
            image=openai_image_tokens,
            largest_image=2500,
            page_text=_PAGE_TEXT,
            page_image=2500,
            max_pages=100,
            multiplier=Fraction("33.34"),
        ),
        # A PDF: each page's text and an image of it; 600 pages a request (100 for
        # models with a 200k window).
        "anthropic": VendorMedia(
            image=anthropic_image_tokens,
            largest_image=_anthropic_most(),
            page_text=_PAGE_TEXT,
            page_image=_anthropic_most(),
            max_pages=600,
            multiplier=Fraction(1),
        ),
        # A PDF: 258 tokens a page (Gemini 2), 560 (Gemini 3's default for documents,
        # medium); 1,000 pages.
        "google": VendorMedia(
            image=gemini_image_tokens,
            largest_image=gemini_image_tokens(_LARGEST_SIDE, _LARGEST_SIDE),
            page_text=0,
            page_image=560,
            max_pages=1000,
            multiplier=Fraction(1),
        ),
    }
)
"""Per vendor (`ModelSettings.vendor`); any other vendor counts as the largest of them."""


_MOST_PAGES = max(vendor.max_pages for vendor in VENDORS.values())


def _most(width: int, height: int) -> int:
    return max(vendor.image(width, height) for vendor in VENDORS.values())


_ANY_VENDOR = VendorMedia(
    image=_most,
    largest_image=max(v.largest_image for v in VENDORS.values()),
    page_text=max(v.page_text for v in VENDORS.values()),
    page_image=max(v.page_image for v in VENDORS.values()),
    max_pages=_MOST_PAGES,
    multiplier=max(v.multiplier for v in VENDORS.values()),
)


@dataclass(frozen=True, slots=True)
class MediaRule:
    """How one model counts the turn's attachments: its vendor's row and multiple."""

    vendor: VendorMedia
    multiplier: Fraction

    def image_tokens(self, part: ImagePart) -> int | None:
        """An image's tokens; None when its size is unknown (see `largest_image`)."""
        size = image_size(part)
        if size is None:
            return None
        return math.ceil(self.vendor.image(*size) * self.multiplier)

    @property
    def largest_image(self) -> int:
        return math.ceil(self.vendor.largest_image * self.multiplier)

    def document_tokens(self, part: DocumentPart) -> int | None:
        """A PDF's tokens; None when its page count is unknown (see `largest_document`)."""
        pages = pdf_pages(part)
        return None if pages is None else self._pages(min(pages, self.vendor.max_pages))

    @property
    def largest_document(self) -> int:
        return self._pages(self.vendor.max_pages)

    def _pages(self, pages: int) -> int:
        page = self.vendor.page_text + math.ceil(self.vendor.page_image * self.multiplier)
        return pages * page


@lru_cache(maxsize=256)
def media_rule(vendor: str, multiplier: Decimal | None = None) -> MediaRule:
    """The rule for a model of `vendor` billing images at `multiplier` (unset: the
    largest its vendor documents); an unknown vendor counts as the largest of them."""
    row = VENDORS.get(vendor, _ANY_VENDOR)
    return MediaRule(row, row.multiplier if multiplier is None else Fraction(multiplier))


# What each part measured to, kept as long as the part: measured once per turn however
# many models the turn is fitted to. Parts are frozen, so their measure cannot change.
_SIZES: weakref.WeakKeyDictionary[ImagePart, tuple[int, int] | None] = weakref.WeakKeyDictionary()
_PAGES: weakref.WeakKeyDictionary[DocumentPart, int | None] = weakref.WeakKeyDictionary()
# Enough base64 for any header: a JPEG's frame header comes after its EXIF (64 KiB).
_HEADER_CHARS = 96 * 1024


def image_size(part: ImagePart) -> tuple[int, int] | None:
    """The image's width and height from its header; None for a URL or unreadable data."""
    if part not in _SIZES:
        _SIZES[part] = None if part.data is None else _read_size(part.data, part.media_type)
    return _SIZES[part]


def pdf_pages(part: DocumentPart) -> int | None:
    """The PDF's page count; None for a URL or a PDF that does not parse."""
    if part not in _PAGES:
        _PAGES[part] = None if part.data is None else _count_pages(part.data)
    return _PAGES[part]


def _read_size(data: str, media_type: str | None) -> tuple[int, int] | None:
    opener = _openers().get(media_type or "")
    if opener is None:
        return None
    # The header first: a whole image is decoded from base64 only when it is not enough.
    head = data[:_HEADER_CHARS]
    for chunk in (head, data) if len(head) < len(data) else (data,):
        try:
            with opener(io.BytesIO(binascii.a2b_base64(chunk))) as image:
                width, height = image.size
        except Exception:  # noqa: S112 (untrusted data: whatever fails, the size is unknown)
            continue
        if width > 0 and height > 0:
            return width, height
    return None


@lru_cache(maxsize=1)
def _openers() -> dict[str, Callable[[io.BytesIO], ImageFile]]:
    # Each format's own reader, chosen by the declared type: it reads the header and no
    # pixels, and without Image.open's pixel-count check (nothing here is decoded).
    from PIL import GifImagePlugin, JpegImagePlugin, PngImagePlugin, WebPImagePlugin

    return {
        "image/png": PngImagePlugin.PngImageFile,
        "image/jpeg": JpegImagePlugin.JpegImageFile,
        "image/gif": GifImagePlugin.GifImageFile,
        "image/webp": WebPImagePlugin.WebPImageFile,
    }


def _count_pages(data: str) -> int | None:
    from pypdf import PdfReader, apply_configuration

    # No vendor takes more than _MOST_PAGES pages, so a page tree larger than that (and
    # its inner nodes) is not walked to its end: its count is unknown, and counts as the
    # most. The walk parses each page's object: about 45 us a page.
    try:
        with apply_configuration(
            page_tree_maximum_entries=_MOST_PAGES * 5 // 4, page_tree_maximum_depth=32
        ):
            reader = PdfReader(io.BytesIO(binascii.a2b_base64(data)), strict=False)
            # Encrypted with an empty password (permissions only), or no provider reads it.
            if reader.is_encrypted and not reader.decrypt(""):
                return None
            pages = len(reader.pages)
    except Exception:
        return None
    return pages if pages > 0 else None
