"""The documentation holds together: every link and named file exists, the generated
configuration reference is current, and what the pages name is what the code does.

The tutorial's blocks run in tests/test_tutorial.py; `mkdocs build --strict` in `.ci/run`
builds the site and the API reference.
"""

from __future__ import annotations

import ast
import builtins
import os
import re
import tomllib
from pathlib import Path

import pytest
import yaml

from worker.cli.config_reference import keys, reference
from worker.observability.metrics import is_exported
from worker.settings import (
    HedgingSettings,
    ModelSettings,
    ProviderSettings,
    Settings,
    load_settings,
)

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, ROOT / "CHANGELOG.md", *sorted(DOCS.rglob("*.md"))]
# Pages the site makes from files outside docs/ (.ci/mkdocs_hooks.py).
GENERATED = {DOCS / "changelog.md": ROOT / "CHANGELOG.md"}
REPO_DIRS = ("bench/", "breakers/", "budgets/", "deploy/", "docs/", "examples/", "tests/")
REPO_DIRS += ("rediskit/", "worker/")
SOURCES = ("worker", "breakers", "budgets", "rediskit")
# Files a page tells the reader to make (docs/deploy.md: `cp .env.example .env`).
CREATED_BY_READER = {"deploy/.env"}
# The pages whose code blocks a reader copies as they are.
COPYABLE = ("tutorial.md", "fleet.md", "install.md", "troubleshooting.md", "observability.md")

_FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.M | re.S)
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6} (.+?)\s*$", re.M)


def _name(page: Path) -> str:
    return str(page.relative_to(ROOT))


def _prose(text: str) -> str:
    """The page without its fenced blocks (a `# comment` in a shell block is no heading)."""
    return _FENCE.sub("", text)


def _slug(heading: str) -> str:
    """A heading's anchor, as mkdocs' toc and GitHub make it."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[\s]+", "-", re.sub(r"[^\w\s-]", "", text))


def _anchors(page: Path) -> set[str]:
    return {_slug(h) for h in _HEADING.findall(_prose(page.read_text(encoding="utf-8")))}


def test_the_readme_is_a_front_page() -> None:
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= 250, f"README.md has {lines} lines: the detail belongs in docs/"


def test_the_quick_start_test_command_is_what_ci_runs() -> None:
    """The README's second quick-start command is the last line of `.ci/run`."""
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    quick = README.read_text(encoding="utf-8").split("## Quick start", 1)[1]
    commands = _FENCE.search(quick).group(2).splitlines()  # type: ignore[union-attr]
    assert commands == ["pip install -e . && relevo demo", ci]


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_link_leads_somewhere(page: Path) -> None:
    """Relative links reach a file, and an anchor a heading of that file."""
    text = _prose(page.read_text(encoding="utf-8"))
    broken = []
    for target in _LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        linked = GENERATED.get(linked, linked)
        if page.name == "CHANGELOG.md" and path.startswith("docs/") is False and path:
            broken.append(f"{target} (the changelog links into docs/ only)")
        elif not linked.exists():
            broken.append(target)
        elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
            broken.append(f"{target} (no such heading)")
    assert not broken, f"{_name(page)} links to what is not there: {broken}"


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_named_file_exists(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    assert "](../" not in text or page.is_relative_to(DOCS / "design"), "points outside docs/"
    named = {m for m in re.findall(r"`([\w./*-]+)`", text) if m.startswith(REPO_DIRS)}
    named -= CREATED_BY_READER
    missing = sorted(path for path in named if not list(ROOT.glob(path.rstrip("/"))))
    assert not missing, f"{_name(page)} names files that do not exist: {missing}"


def test_every_page_is_in_the_site() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))

    def pages(nav: object) -> set[str]:
        if isinstance(nav, str):
            return {nav}
        items = nav.values() if isinstance(nav, dict) else nav
        return set().union(*(pages(item) for item in items))  # type: ignore[union-attr]

    listed = pages(config["nav"])
    on_disk = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")} | {"changelog.md"}
    assert listed == on_disk


def test_the_index_reaches_every_guide() -> None:
    """A new user finds install, configuration, operating, troubleshooting and upgrades."""
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    linked = {target.partition("#")[0] for target in _LINK.findall(index)}
    needed = {
        "install.md", "tutorial.md", "configuration.md", "providers.md", "budgets.md",
        "breakers.md", "operating.md", "deploy.md", "troubleshooting.md", "frameworks.md",
        "api/index.md", "design/index.md", "changelog.md",
    }  # fmt: skip
    assert needed <= linked, f"docs/index.md does not link {sorted(needed - linked)}"


def test_the_configuration_reference_is_current() -> None:
    """docs/configuration.md is what the generator writes from the settings models now:
    a setting added (or changed) without the page regenerated fails here."""
    page = (DOCS / "configuration.md").read_text(encoding="utf-8")
    assert page == reference(), (
        "docs/configuration.md is stale: python -m worker.cli.config_reference "
        "> docs/configuration.md"
    )


def test_the_configuration_reference_lists_every_key() -> None:
    """Spot checks of the generator itself: keys, their environment variables, defaults."""
    page = (DOCS / "configuration.md").read_text(encoding="utf-8")
    for name in Settings.model_fields:
        assert f"`{name}" in page or f"`[{name}" in page, name
    for section in ("retry", "redis", "budgets", "http", "observability"):
        model = Settings.model_fields[section].annotation
        assert model is not None
        for field in model.model_fields:
            assert f"`{section}.{field}`" in page, f"{section}.{field}"
            assert f"`RELEVO_{section.upper()}__{field.upper()}`" in page
    assert "| `redis.timeout_s` | number (> 0, ≤ 5) | `0.25` | `RELEVO_REDIS__TIMEOUT_S` |" in page
    assert "| `chain.models` | list of text (at least 2, at most 3) | required |" in page


def _source_strings() -> set[str]:
    found: set[str] = set()
    for package in SOURCES:
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    found.add(node.value)
    return found


def test_troubleshooting_names_real_events_and_metrics() -> None:
    """Every log event and metric the page tells a reader to look for is one the code
    emits (a renamed event would leave the page pointing at nothing)."""
    text = (DOCS / "troubleshooting.md").read_text(encoding="utf-8")
    quoted = set(re.findall(r"`([^`\s]+)`", text))
    metrics = {re.sub(r"\{.*", "", q) for q in quoted if q.startswith("relevo_")}
    assert len(metrics) >= 5
    unknown = sorted(m for m in metrics if not is_exported(m))
    assert not unknown, f"no such metric: {unknown}"
    events = {q for q in quoted if re.fullmatch(r"[a-z_]+\.[a-z_]+", q)}
    events -= {q for q in quoted if q.endswith((".md", ".py", ".toml", ".json", ".pem"))}
    events -= {key.path for _, _, rows in keys() for key in rows}  # `redis.timeout_s`
    assert len(events) >= 10
    strings = _source_strings()
    breaker_kinds = {f"breaker.{kind}" for kind in ("opened", "reopened", "closed")}
    unknown = sorted(e for e in events if e not in strings and e not in breaker_kinds)
    assert not unknown, f"no such log event in the code: {unknown}"
    import breakers

    assert {k.value for k in breakers.TransitionKind} >= {"opened", "reopened"}


# The sections `examples/chain.toml` writes out with their defaults.
OPTIONAL_SECTIONS = (
    "retry",
    "degradation",
    "redis",
    "broker",
    "worker",
    "breakers",
    "budgets",
    "limits",
    "observability",
    "console",
    "http",
)


def test_the_complete_example_has_every_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """`examples/chain.toml` is complete. Every key is in it, set to its default in
    the optional sections, or shown commented out (`# key = ...`) when unset by default."""
    path = ROOT / "examples" / "chain.toml"
    text = path.read_text(encoding="utf-8")
    raw = tomllib.loads(text)
    for env in ("OPENAI_API_KEY", "AZURE_OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY"):
        monkeypatch.setenv(env, "sk-test")
    for name in list(os.environ):
        if name.startswith("RELEVO_"):
            monkeypatch.delenv(name)
    settings = load_settings(path)
    commented = set(re.findall(r"^# ?(\w+) = ", text, re.M))
    for section in OPTIONAL_SECTIONS:
        model = type(getattr(settings, section))
        assert getattr(settings, section) == model(), f"[{section}] differs from the defaults"
        for field in model.model_fields:
            assert field in raw.get(section, {}) or field in commented, f"{section}.{field}"
    for field in Settings.model_fields:
        assert field in raw, f"examples/chain.toml has no {field}"
    assert settings.chain.hedging == HedgingSettings(), "[chain.hedging] differs from defaults"
    for field in HedgingSettings.model_fields:
        assert field in raw["chain"]["hedging"], f"chain.hedging.{field}"
    for model in (ProviderSettings, ModelSettings):
        for field in model.model_fields:
            assert re.search(rf"\b{field}\b", text), f"examples/chain.toml never names {field}"


def _subcommands(argv: list[str], capsys: pytest.CaptureFixture[str]) -> list[str]:
    """The subcommands `relevo ARGV --help` lists under its positional arguments."""
    from worker.cli.main import main

    capsys.readouterr()
    with pytest.raises(SystemExit):
        main([*argv, "--help"])
    text = capsys.readouterr().out
    section = text.split("positional arguments:", 1)[1] if "positional arguments:" in text else ""
    section = re.split(r"\n\S", section, maxsplit=1)[0]  # up to the next heading
    return re.findall(r"^    (\w[\w-]*)", section, re.M)


def test_operating_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    """`docs/operating.md` lists every command (and every subcommand)."""
    doc = (ROOT / "docs" / "operating.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\| `relevo ([a-z][a-z-]*(?: [a-z][a-z-]*)?)", doc, re.M))
    commands = _subcommands([], capsys)
    assert "worker" in commands
    missing = []
    for command in commands:
        subcommands = _subcommands([command], capsys)
        missing += [f"{command} {sub}" for sub in subcommands if f"{command} {sub}" not in listed]
        if not subcommands and not any(entry.split()[0] == command for entry in listed):
            missing.append(command)
    assert not missing, f"docs/operating.md does not list: {missing}"


def test_every_python_block_compiles() -> None:
    """The guide's Python blocks that the tutorial does not run may not need what a module
    cannot do (a top-level `await`), use a name they never define or import (`data`), or
    hold `...` for what the reader must fill in. (The design notes quote fragments.)"""
    count = 0
    for page in [README, *(DOCS / name for name in COPYABLE)]:
        text = page.read_text(encoding="utf-8")
        for block in _FENCE.finditer(text):
            if block.group(1) != "python":
                continue
            count += 1
            where = f"{_name(page)}:{text.count(chr(10), 0, block.start()) + 1}"
            _check_python(block.group(2), where)
    assert count >= 4


def _check_python(code: str, where: str) -> None:
    tree = ast.parse(code, where)
    compile(tree, where, "exec", dont_inherit=True)
    defined = set(dir(builtins))
    used = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (used if isinstance(node.ctx, ast.Load) else defined).add(node.id)
        elif isinstance(node, ast.alias):
            defined.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            defined.add(node.name)
        elif isinstance(node, ast.arg):
            defined.add(node.arg)
    assert not used - defined, f"{where} uses names it never defines: {used - defined}"
    placeholders = [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value is ...]
    assert not placeholders, f"{where} holds `...` where code should be"


# What a reader copies to build, install or deploy this release: a wheel's name, an image's
# tag. Other versions in the docs name releases on purpose (the previous one, upgrades).
_RELEASE_NAMED = re.compile(
    r"relevo-(?P<wheel>\d+\.\d+\.\d+)-py3"
    r"|relevo:(?P<image>\d+\.\d+\.\d+)"
    r"|newTag: (?P<tag>\d+\.\d+\.\d+)"
)


def test_every_build_and_deploy_instruction_names_this_release() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    files = [*PAGES, *sorted((ROOT / "deploy").rglob("*")), *sorted((ROOT / "examples").rglob("*"))]
    stale = [
        f"{path.relative_to(ROOT)}:{number}: {match.group(0)}"
        for path in files
        if path.is_file()
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        for match in _RELEASE_NAMED.finditer(line)
        if version not in match.groups()
    ]
    assert stale == [], f"these name another release than {version}"
