"""What the dependency ranges in pyproject.toml resolve to, and where they start.

    python .ci/versions.py             # the installed version of each tracked dependency
    python .ci/versions.py --lowest redis
                                       # `redis==X`: the lowest version the range allows

CI prints the first after installing into a fresh environment (so its log says which
releases the suite passed with) and installs the second into another environment to run
the Redis transport tests on the oldest redis-py the range takes.
"""

from __future__ import annotations

import sys
import tomllib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
TRACKED = (
    "redis",
    "hiredis",
    "celery",
    "kombu",
    "pydantic",
    "pydantic-settings",
    "httpx",
    "structlog",
    "openai-agents",
    "pydantic-ai-slim",
)


def requirements() -> dict[str, Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    found: dict[str, Requirement] = {}
    for line in [*project["dependencies"], *project["optional-dependencies"]["dev"]]:
        requirement = Requirement(line)
        found.setdefault(requirement.name, requirement)
    return found


def lowest(name: str) -> str:
    for spec in requirements()[name].specifier:
        if spec.operator == ">=":
            return f"{name}=={spec.version}"
    raise SystemExit(f"{name} has no lower bound in pyproject.toml")


def installed() -> str:
    ranges = requirements()
    lines = []
    for name in TRACKED:
        try:
            got = version(name)
        except PackageNotFoundError:
            got = "not installed"
        allowed = str(ranges[name].specifier) if name in ranges else "(through another)"
        lines.append(f"  {name:<18} {got:<12} allowed {allowed}")
    return "tested with:\n" + "\n".join(lines)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--lowest"]:
        print(lowest(sys.argv[2]))
    else:
        print(installed())
