"""Images and PDFs count at least what each vendor's documentation says they bill.

Each vendor's documented formula is written again in tests/mediakit.py, as its
documentation states it, and checked here on the documentation's worked examples; the
estimate (`worker.turn.media`) must never count less than the documented count of any
model of the vendor, for any image size. The attachments are real files, made with
Pillow and pypdf and read back as relevo reads them. The documents: see tests/mediakit.py.
"""

from __future__ import annotations

import base64
import io
import math
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image
from pypdf import PdfWriter
from pypdf.generic import ArrayObject, DictionaryObject, NameObject, NumberObject

from tests.mediakit import (
    LEGACY_PIXELS,
    OPENAI_PATCH_MODELS,
    OPENAI_TILE_MODELS,
    anthropic_by_area,
    anthropic_by_patches,
    gemini_tiles,
    openai_patches,
    openai_tiles,
)
from worker.turn import media
from worker.turn.media import (
    VENDORS,
    anthropic_image_tokens,
    gemini_image_tokens,
    image_size,
    media_rule,
    openai_image_tokens,
    openai_patch_tokens,
    openai_tile_tokens,
    pdf_pages,
)
from worker.types import DocumentPart, ImagePart

SIDES = st.integers(1, 8000)


# --- Worked examples ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("size", "tokens"),
    [((1024, 1024), 765), ((2048, 4096), 1105)],
)
def test_openai_tiles_match_the_documented_examples(size: tuple[int, int], tokens: int) -> None:
    # "A 1024 x 1024 square image in detail: high mode costs 765 tokens"; "a 2048 x 4096
    # image in detail: high mode costs 1105 tokens".
    assert openai_tile_tokens(*size) == tokens == openai_tiles(*size, 85, 170)
    assert openai_image_tokens(*size) >= tokens


@pytest.mark.parametrize(("size", "patches"), [((1024, 1024), 1024), ((1800, 2400), 1452)])
def test_openai_patches_match_the_documented_examples(size: tuple[int, int], patches: int) -> None:
    # The guide's two examples, at the 1,536 budget; gpt-4.1-mini bills them x 1.62.
    assert openai_patches(*size, 1536) == patches
    assert openai_patch_tokens(*size, budget=1536) >= patches
    mini = media_rule("openai", Decimal("1.62"))
    assert math.ceil(mini.vendor.image(*size) * mini.multiplier) >= math.ceil(patches * 1.62)


@pytest.mark.parametrize(
    ("size", "tokens"),
    [((200, 200), 54), ((1000, 1000), 1334), ((1092, 1092), 1590)],
)
def test_anthropic_matches_the_documented_examples(size: tuple[int, int], tokens: int) -> None:
    # "200x200 px ~54", "1000x1000 px ~1334", "1092x1092 px ~1590" (tokens = w x h / 750).
    assert anthropic_by_area(*size) == tokens
    assert anthropic_image_tokens(*size, long_edge=1568, pixels=LEGACY_PIXELS) >= tokens
    assert anthropic_image_tokens(*size) >= tokens


@pytest.mark.parametrize("size", [(1092, 1092), (951, 1268), (896, 1344), (819, 1456), (784, 1568)])
def test_anthropic_leaves_the_documented_largest_sizes_as_they_are(size: tuple[int, int]) -> None:
    # The guide's table of the largest images not resized, at about 1,600 tokens each.
    legacy = anthropic_image_tokens(*size, long_edge=1568, pixels=LEGACY_PIXELS)
    assert legacy == max(math.ceil(size[0] * size[1] / 750), anthropic_by_patches(*size))
    assert anthropic_by_area(*size) == math.ceil(size[0] * size[1] / 750)
    assert 1550 <= anthropic_by_area(*size) <= 1640


@pytest.mark.parametrize(
    ("size", "tokens"), [((384, 384), 258), ((600, 400), 258), ((1024, 1024), 1032)]
)
def test_gemini_matches_the_documented_tiles(size: tuple[int, int], tokens: int) -> None:
    assert gemini_tiles(*size) == tokens
    # Gemini 3 counts an image at 1,120 by default (media resolution high).
    assert gemini_image_tokens(*size) == max(tokens, 1120)


# --- Never below any model's documented count -------------------------------------------


@settings(max_examples=400, deadline=None)
@given(SIDES, SIDES)
def test_openai_never_counts_less_than_any_openai_model(width: int, height: int) -> None:
    default = media_rule("openai")
    for base, tile, multiple in OPENAI_TILE_MODELS.values():
        billed = openai_tiles(width, height, base, tile)
        assert _count(media_rule("openai", multiple), width, height) >= billed
        assert _count(default, width, height) >= billed
    for budget, multiple in OPENAI_PATCH_MODELS.values():
        billed = math.ceil(openai_patches(width, height, budget) * multiple)
        assert _count(media_rule("openai", multiple), width, height) >= billed
        assert _count(default, width, height) >= billed
    assert _count(default, width, height) <= default.largest_image


# Each model family's documented count, per vendor.
FAMILIES = {
    "anthropic": (anthropic_by_area, anthropic_by_patches),
    "google": (gemini_tiles, lambda width, height: 1120),
}


@pytest.mark.parametrize("vendor", sorted(FAMILIES))
@settings(max_examples=400, deadline=None)
@given(SIDES, SIDES)
def test_a_vendor_never_counts_less_than_any_of_its_models(
    vendor: str, width: int, height: int
) -> None:
    rule = media_rule(vendor)
    count = _count(rule, width, height)
    for family in FAMILIES[vendor]:
        assert count >= family(width, height)
    assert count <= rule.largest_image


@settings(max_examples=200, deadline=None)
@given(SIDES, SIDES)
def test_an_unknown_vendor_counts_the_most_of_them(width: int, height: int) -> None:
    other = _count(media_rule("mistral"), width, height)
    assert other >= max(_count(media_rule(v), width, height) for v in VENDORS)


def _count(rule: media.MediaRule, width: int, height: int) -> int:
    return math.ceil(rule.vendor.image(width, height) * rule.multiplier)


# --- Reading real images ------------------------------------------------------------------


def encode(image: Image.Image, fmt: str, **options: object) -> str:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return base64.b64encode(buffer.getvalue()).decode()


@pytest.mark.parametrize(
    ("fmt", "media_type"),
    [("PNG", "image/png"), ("JPEG", "image/jpeg"), ("GIF", "image/gif"), ("WEBP", "image/webp")],
)
def test_an_images_size_is_read_from_its_header(fmt: str, media_type: str) -> None:
    part = ImagePart(media_type=media_type, data=encode(Image.new("RGB", (1234, 567)), fmt))
    assert image_size(part) == (1234, 567)
    assert media_rule("anthropic").image_tokens(part) == anthropic_image_tokens(1234, 567)


def test_a_jpeg_whose_header_comes_after_a_large_exif_is_read_whole() -> None:
    exif = Image.Exif()
    exif[0x010E] = "x" * 65000  # ImageDescription: 65 KB before the frame header
    data = encode(Image.new("RGB", (3000, 2000)), "JPEG", exif=exif.tobytes())
    assert len(data) > media._HEADER_CHARS
    assert image_size(ImagePart(media_type="image/jpeg", data=data)) == (3000, 2000)


def test_an_image_is_read_once_however_many_models_count_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reads: list[str] = []
    read = media._read_size

    def counting(data: str, media_type: str | None) -> tuple[int, int] | None:
        reads.append(data)
        return read(data, media_type)

    monkeypatch.setattr(media, "_read_size", counting)
    part = ImagePart(media_type="image/png", data=encode(Image.new("RGB", (800, 600)), "PNG"))
    counts = [media_rule(v).image_tokens(part) for v in (*VENDORS, "other")] * 3
    assert len(reads) == 1
    assert counts[0] == math.ceil(openai_image_tokens(800, 600) * Decimal("33.34"))


@pytest.mark.parametrize(
    "part",
    [
        ImagePart(url="https://example.com/cat.png"),
        ImagePart(media_type="image/png", data=base64.b64encode(b"not an image" * 50).decode()),
        # Declared PNG, a JPEG: no provider reads it as declared.
        ImagePart(media_type="image/png", data=encode(Image.new("RGB", (10, 10)), "JPEG")),
    ],
    ids=["url", "garbage", "mistyped"],
)
def test_an_image_that_cannot_be_measured_counts_as_the_largest(part: ImagePart) -> None:
    assert image_size(part) is None
    for vendor in (*VENDORS, "other"):
        assert media_rule(vendor).image_tokens(part) is None


def test_a_huge_declared_image_is_read_without_decoding_its_pixels() -> None:
    # 40,000 x 40,000 pixels declared in a tiny PNG: Image.open would refuse it as a
    # decompression bomb; its header is all relevo reads.
    small = Image.new("1", (40000, 40000))
    part = ImagePart(media_type="image/png", data=encode(small, "PNG"))
    assert image_size(part) == (40000, 40000)
    assert media_rule("anthropic").image_tokens(part) <= media_rule("anthropic").largest_image


# --- Reading real PDFs ------------------------------------------------------------------


def pdf(pages: int, **encrypt: str) -> str:
    writer = PdfWriter()
    for _ in range(pages):
        writer.add_blank_page(612, 792)
    if encrypt:
        writer.encrypt(**encrypt)
    buffer = io.BytesIO()
    writer.write(buffer)
    return base64.b64encode(buffer.getvalue()).decode()


def test_a_pdfs_pages_are_counted() -> None:
    part = DocumentPart(data=pdf(7), name="invoice.pdf")
    assert pdf_pages(part) == 7
    # Anthropic: each page's text (up to 3,000) and an image of it; Gemini: 560 a page
    # (Gemini 3's default resolution for documents; Gemini 2 counts 258).
    assert media_rule("anthropic").document_tokens(part) == 7 * (
        3000 + VENDORS["anthropic"].page_image
    )
    assert media_rule("google").document_tokens(part) == 7 * 560
    openai = media_rule("openai", Decimal(1)).document_tokens(part)
    assert openai == 7 * (3000 + 2500)


def test_a_pdf_longer_than_a_vendor_takes_counts_its_most_pages() -> None:
    # A longer PDF is refused, unbilled; any PDF it takes has at most that many pages.
    part = DocumentPart(data=pdf(150))
    assert pdf_pages(part) == 150
    rule = media_rule("openai", Decimal(1))
    assert rule.document_tokens(part) == rule.largest_document == 100 * (3000 + 2500)
    assert media_rule("google").document_tokens(part) == 150 * 560


def test_a_pdf_longer_than_any_vendor_takes_is_not_walked_to_its_end() -> None:
    # 1,300 pages: more than any vendor takes (Gemini's 1,000) and than the walk's limit,
    # so its count stays unknown, and it counts at each vendor's most pages.
    part = DocumentPart(data=pdf(1300))
    assert pdf_pages(part) is None
    assert media_rule("google").document_tokens(part) is None
    assert media_rule("google").largest_document == 1000 * 560


def test_an_encrypted_pdf_anyone_can_open_is_counted() -> None:
    part = DocumentPart(data=pdf(3, user_password="", owner_password="owner"))
    assert pdf_pages(part) == 3


def test_a_pdf_that_needs_a_password_counts_as_the_largest() -> None:
    part = DocumentPart(data=pdf(3, user_password="secret", owner_password="owner"))
    assert pdf_pages(part) is None
    assert media_rule("anthropic").document_tokens(part) is None


def cyclic_pdf() -> str:
    # A page tree whose /Kids holds the tree itself, and a /Count that lies.
    writer = PdfWriter()
    writer.add_blank_page(612, 792)
    pages = writer.root_object["/Pages"].get_object()
    pages[NameObject("/Kids")] = ArrayObject(
        [*pages["/Kids"], writer.root_object.raw_get("/Pages")]
    )
    pages[NameObject("/Count")] = NumberObject(1)
    buffer = io.BytesIO()
    writer.write(buffer)
    return base64.b64encode(buffer.getvalue()).decode()


@pytest.mark.parametrize(
    "data",
    [
        base64.b64encode(b"%PDF-1.7\n" + b"garbage " * 500).decode(),
        base64.b64encode(b"not a pdf at all").decode(),
    ],
    ids=["truncated", "not-a-pdf"],
)
def test_a_pdf_that_does_not_parse_counts_as_the_largest(data: str) -> None:
    part = DocumentPart(data=data)
    assert pdf_pages(part) is None


def test_a_page_tree_that_loops_is_not_walked_forever() -> None:
    part = DocumentPart(data=cyclic_pdf())
    pages = pdf_pages(part)
    # pypdf refuses the loop (unknown: the largest) or counts what it walked once.
    assert pages is None or pages == 1


def deep_pdf(depth: int) -> str:
    # One page under `depth` nested /Pages nodes, each its own object.
    writer = PdfWriter()
    writer.add_blank_page(612, 792)
    pages = writer.root_object["/Pages"].get_object()
    node = pages["/Kids"][0]
    for _ in range(depth):
        kids = ArrayObject([node])
        parent = DictionaryObject(
            {NameObject("/Type"): NameObject("/Pages"), NameObject("/Kids"): kids}
        )
        parent[NameObject("/Count")] = NumberObject(1)
        node = writer._add_object(parent)
    pages[NameObject("/Kids")] = ArrayObject([node])
    buffer = io.BytesIO()
    writer.write(buffer)
    return base64.b64encode(buffer.getvalue()).decode()


def test_a_page_tree_nested_too_deep_is_not_walked() -> None:
    assert pdf_pages(DocumentPart(data=deep_pdf(5))) == 1
    assert pdf_pages(DocumentPart(data=deep_pdf(3000))) is None


def test_a_pdf_by_url_counts_as_the_largest() -> None:
    part = DocumentPart(url="https://example.com/report.pdf")
    assert pdf_pages(part) is None
    assert media_rule("anthropic").largest_document == 600 * (
        3000 + VENDORS["anthropic"].page_image
    )
