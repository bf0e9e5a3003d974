"""The package as a user gets it: run inside a fresh virtual environment where only the
built wheel (or sdist) of relevo is installed, from outside the source tree.

    python .ci/package_check.py SOURCE_ROOT

Checks that every file of the source packages (Lua scripts, console templates, static
files, py.typed) is installed, that every public name imports, that `relevo --version`
gives the project's version and that `relevo demo --json` runs end to end (exit 0,
no turn lost). Prints one line per check; exits 1 at the first that fails.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import tomllib
from pathlib import Path

PACKAGES = ("worker", "breakers", "budgets", "rediskit")
# What optional extras bring (`relevo[agents]`, `relevo[pydantic-ai]`...), not the wheel.
OPTIONAL = {"agents", "pydantic_ai", "botocore", "google", "opentelemetry"}


def main(source: Path) -> None:
    version = tomllib.loads((source / "pyproject.toml").read_text())["project"]["version"]
    for package in PACKAGES:
        installed = Path(importlib.import_module(package).__file__ or "").parent
        assert source not in installed.parents, f"{package} imported from the source tree"
        wanted = {
            p.relative_to(source / package)
            for p in (source / package).rglob("*")
            if p.is_file() and "__pycache__" not in p.parts
        }
        missing = sorted(str(p) for p in wanted if not (installed / p).is_file())
        assert not missing, f"{package}: not installed: {missing}"
        print(f"ok  {package}: {len(wanted)} files installed, py.typed among them")
    names, extras = 0, []
    for module_path in sorted((source / "worker").rglob("__init__.py")):
        dotted = ".".join(module_path.parent.relative_to(source).parts)
        try:
            module = importlib.import_module(dotted)
        except ModuleNotFoundError as exc:
            # A framework's model needs that framework: its extra, not installed here.
            if (exc.name or "").split(".")[0] not in OPTIONAL:
                raise
            extras.append(f"{dotted} (needs {exc.name})")
            continue
        for name in getattr(module, "__all__", ()):
            getattr(module, name)
            names += 1
    print(f"ok  {names} public names of worker's packages import; left to extras: {extras}")
    relevo = str(Path(sys.executable).with_name("relevo"))  # the environment's own command
    shown = subprocess.run([relevo, "--version"], capture_output=True, text=True, check=True)
    assert shown.stdout.strip() == f"relevo {version}", shown.stdout
    print(f"ok  relevo --version: {shown.stdout.strip()}")
    ran = subprocess.run([relevo, "demo", "--json"], capture_output=True, text=True, check=False)
    assert ran.returncode == 0, ran.stderr[-2000:]
    total = json.loads(ran.stdout)["total"]
    assert total["turns"] > 0, total
    assert total["lost"] == 0, total
    print(f"ok  relevo demo --json: {total['turns']} turns, none lost")


if __name__ == "__main__":
    main(Path(sys.argv[1]).resolve())
