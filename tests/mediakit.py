"""Each vendor's documented image formula, written as its documentation states it.

The oracles that tests/test_media_tokens.py holds the estimate to, and that
bench/estimate.py compares it with. The documents:

- OpenAI, "Images and vision", calculating costs:
  https://platform.openai.com/docs/guides/images-vision#calculating-costs
  and, for PDFs, "File inputs": https://platform.openai.com/docs/guides/pdf-files
- Anthropic, "Vision": https://platform.claude.com/docs/en/build-with-claude/vision
  and "PDF support": https://platform.claude.com/docs/en/build-with-claude/pdf-support
- Google, "Understand and count tokens": https://ai.google.dev/gemini-api/docs/tokens
  and "Media resolution": https://ai.google.dev/gemini-api/docs/media-resolution
"""

from __future__ import annotations

import math
from decimal import Decimal


def openai_tiles(width: int, height: int, base: int, tile: int) -> int:
    """Scale to fit in 2048 x 2048; scale so the shortest side is 768 (never up); count
    the 512-pixel squares: `tile` each, plus `base`."""
    w, h = float(width), float(height)
    if max(w, h) > 2048:
        w, h = w * 2048 / max(w, h), h * 2048 / max(w, h)
    if min(w, h) > 768:
        w, h = w * 768 / min(w, h), h * 768 / min(w, h)
    return base + tile * math.ceil(round(w) / 512) * math.ceil(round(h) / 512)


def openai_patches(width: int, height: int, budget: int) -> int:
    """32-pixel patches; over the budget, shrink by sqrt(budget x 32^2 / (w x h)), then
    again so whole patches fit, and count the patches of the resized image."""
    patches = math.ceil(width / 32) * math.ceil(height / 32)
    if patches <= budget:
        return patches
    shrink = math.sqrt(32 * 32 * budget / (width * height))
    across, down = width * shrink / 32, height * shrink / 32
    shrink *= min(math.floor(across) / across, math.floor(down) / down)
    resized_w, resized_h = int(width * shrink), int(height * shrink)
    return min(math.ceil(resized_w / 32) * math.ceil(resized_h / 32), budget)


# OpenAI's models, each with its documented scheme and multiple.
OPENAI_TILE_MODELS = {
    "gpt-4o, gpt-4.1, gpt-4.5": (85, 170, Decimal(1)),
    "gpt-5, gpt-5-chat-latest": (70, 140, Decimal(1)),
    "o1, o1-pro, o3": (75, 150, Decimal(1)),
    "computer-use-preview": (65, 129, Decimal(1)),
    "gpt-4o-mini": (2833, 5667, Decimal("33.34")),
}
OPENAI_PATCH_MODELS = {
    "gpt-4.1-mini, gpt-5-mini": (1536, Decimal("1.62")),
    "gpt-4.1-nano, gpt-5-nano": (1536, Decimal("2.46")),
    "o4-mini": (1536, Decimal("1.72")),
    "gpt-5.4, gpt-5.5": (2500, Decimal(1)),
}


LEGACY_PIXELS = 784 * 1568


def anthropic_by_area(width: int, height: int) -> int:
    """Claude before Opus 4.7: within 1,568 pixels a side and about 1.15 megapixels (the
    largest of the guide's table of sizes not resized, 784 x 1568), then w x h / 750."""
    scale = min(1.0, 1568 / max(width, height), math.sqrt(LEGACY_PIXELS / (width * height)))
    w, h = int(width * scale), int(height * scale)
    return math.ceil(w * h / 750)


def anthropic_by_patches(width: int, height: int) -> int:
    """Claude Opus 4.7 and later: within 2,576 pixels a side and 3.75 megapixels, then
    padded to 28-pixel patches: ceil(width / 28) x ceil(height / 28)."""
    scale = min(1.0, 2576 / max(width, height), math.sqrt(2576 * 1456 / (width * height)))
    w, h = int(width * scale), int(height * scale)
    return math.ceil(w / 28) * math.ceil(h / 28)


def gemini_tiles(width: int, height: int) -> int:
    """Gemini 2: both sides up to 384 pixels, 258 tokens; else 258 a 768 x 768 tile."""
    if width <= 384 and height <= 384:
        return 258
    return 258 * math.ceil(width / 768) * math.ceil(height / 768)
