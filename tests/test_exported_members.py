"""Each package's public surface is what its `__all__` says (ruff's RUF022 keeps it sorted)."""

from __future__ import annotations

import importlib

import pytest


@pytest.mark.parametrize("name", ["worker", "breakers", "budgets"])
def test_every_exported_name_exists_once(name: str) -> None:
    package = importlib.import_module(name)
    exported = package.__all__
    assert len(exported) == len(set(exported))
    for member in exported:
        assert hasattr(package, member), f"{name}.{member}"


def test_breakers_and_budgets_never_import_worker() -> None:
    import subprocess
    import sys

    code = (
        "import sys, breakers, budgets; "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('worker', 'celery', 'httpx')]; "
        "print(','.join(bad))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == ""
