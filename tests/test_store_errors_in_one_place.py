"""Redis's failures are translated in one place (`rediskit.errors`): a test that fails when
another module starts naming redis-py's exceptions on its own.

A module may still name one redis-py exception for a meaning of its own (a script's reply
that is an error, a permission one role lacks), listed below with the reason; anything
else catches `rediskit`'s tuples or `StoreError`.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ROOMS = ("worker", "breakers", "budgets")
# module -> why it names a redis-py exception itself.
OWN_MEANING = {
    "worker/fleet/errors.py": "maps error replies (OOM, READONLY) to what a producer is told",
    "worker/fleet/fairqueue.py": "a script's error reply, and the producer's role lacking EVAL",
    "worker/console/views.py": "a page the viewer role may not read says so",
    "breakers/connection.py": "the hiredis packing raises what redis-py's own packer raises",
    "worker/fleet/broker.py": "kombu's channel expects redis-py's ConnectionError for a closed one",
}


def _names_redis_exceptions(tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("redis.exceptions"):
            return True
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name | ast.Attribute):
            dotted = ast.unparse(node)
            if dotted.startswith("redis.exceptions") or dotted in (
                "redis.RedisError",
                "redis.ConnectionError",
                "redis.TimeoutError",
                "redis.ResponseError",
            ):
                return True
    return False


def _modules() -> list[str]:
    return sorted(
        str(path.relative_to(ROOT))
        for room in ROOMS
        for path in (ROOT / room).rglob("*.py")
        if _names_redis_exceptions(ast.parse(path.read_text(encoding="utf-8")))
    )


def test_only_the_kit_and_the_listed_modules_name_redis_exceptions() -> None:
    found = _modules()
    assert not set(found) - set(OWN_MEANING), (
        "translate Redis failures with rediskit (store_errors, STORE_ERRORS, DOWN, REFUSED), "
        "or list the module here with its own reason"
    )
    assert not set(OWN_MEANING) - set(found), "a listed module no longer needs its entry"


def test_the_scan_finds_both_spellings() -> None:
    assert _names_redis_exceptions(ast.parse("from redis.exceptions import RedisError"))
    assert _names_redis_exceptions(ast.parse("try:\n    pass\nexcept redis.RedisError:\n    pass"))
    assert not _names_redis_exceptions(ast.parse("from rediskit import STORE_ERRORS"))
