"""mkdocs hooks: the repository's CHANGELOG.md is the site's changelog page (one file).

Its links are written for the repository (`docs/budgets.md`); on the site the page
sits beside the others, so they lose the `docs/` prefix.
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

CHANGELOG = Path(__file__).resolve().parent.parent / "CHANGELOG.md"
PAGE = "changelog.md"


def on_files(files: Files, config: MkDocsConfig) -> Files:
    files.append(File.generated(config, PAGE, abs_src_path=str(CHANGELOG)))
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    if page.file.src_uri == PAGE:
        return markdown.replace("](docs/", "](")
    return markdown
