"""Point 2: names that become Redis keys are refused when tricky, wherever they enter.

Tenant and turn ids in a task payload, tenant ids on the `relevo budgets` command
line, provider names, vendors, model slugs, model ids and the key namespace in
the configuration. (That valid names never reach outside the namespace is
checked key by key in tests/test_security_redis.py.)
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.chainkit import settings as chain_settings
from tests.netkit import free_port
from worker.cli.main import main
from worker.errors import ConfigError, InputError
from worker.settings import load_settings
from worker.types import parse_turn_request

# Each would let a name reach another key, pattern or tenant, or look like one it is not.
TRICKY: dict[str, str] = {
    "key separator": "a:b",
    "glob star": "*",
    "glob class": "a[bc]",
    "glob question mark": "a?",
    "hash tag": "{x}",
    "closing brace": "x}",
    "path up": "../",
    "path up inside": "a/../b",
    "slash": "a/b",
    "pair separator": "a|b",
    "leading space": " acme",
    "inner space": "ac me",
    "tab": "acme\t",
    "newline": "acme\n",
    "carriage return": "acme\r",
    "NUL": "acme\x00",
    "Cyrillic a look-alike": "\u0430cme",
    "Greek omicron look-alike": "acm\u03bf",
    "fullwidth letters": "\uff41cme",
    "zero-width space": "ac\u200bme",
    "combining accent": "acme\u0301",
    "right-to-left override": "\u202eemca",
    "1,000 characters": "a" * 1000,
    "empty": "",
    "leading dot": ".acme",
    "leading dash": "-acme",
    "percent-encoded dots": "%2e%2e",
}
# Model ids and the model part of a slug may hold ':' (Ollama tags like "llama3:8b"), ids
# also '/' (org/model), and so may tenant ids ("org:1234", "team/42"): nothing else of the list.
ALLOWED = {
    "model id": {"key separator", "slash"},
    "model slug": {"key separator"},
    "tenant id": {"key separator", "slash"},
}
TRICKY_TENANTS = {k: v for k, v in TRICKY.items() if k not in ALLOWED["tenant id"]}


def payload(**fields: Any) -> dict[str, Any]:
    return {"tenant_id": "acme", "messages": [{"role": "user", "content": "hi"}], **fields}


@pytest.mark.parametrize("name", TRICKY_TENANTS, ids=list(TRICKY_TENANTS))
def test_a_tricky_tenant_id_in_a_task_payload_is_refused(name: str) -> None:
    with pytest.raises(InputError, match=r"^tenant_id: tenant id ") as caught:
        parse_turn_request(payload(tenant_id=TRICKY[name]))
    assert len(str(caught.value).splitlines()) == 1


@pytest.mark.parametrize("name", TRICKY, ids=list(TRICKY))
def test_a_tricky_turn_id_in_a_task_payload_is_refused(name: str) -> None:
    with pytest.raises(InputError, match=r"^turn_id: String should match pattern"):
        parse_turn_request(payload(turn_id=TRICKY[name]))


@pytest.mark.parametrize("name", TRICKY_TENANTS, ids=list(TRICKY_TENANTS))
@pytest.mark.parametrize("action", ["set", "show"])
def test_a_tricky_tenant_id_on_the_command_line_is_refused_before_redis(
    name: str, action: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Nothing listens there: a command that reached for Redis would exit 6, not 2.
    monkeypatch.setenv("RELEVO_REDIS__URL", f"redis://127.0.0.1:{free_port()}/0")
    options = ["--daily", "1", "--monthly", "2"] if action == "set" else []
    assert main(["budgets", action, *options, "--", TRICKY[name]]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("relevo: tenant id ")
    assert len(err.splitlines()) == 1  # one clear line, no traceback


def config_with(name: str, where: str) -> dict[str, Any]:
    """The test chain's settings as data, with `name` put in one place."""
    data = chain_settings("http://127.0.0.1:1").model_dump(mode="json")
    if where == "provider":
        data["providers"][name] = data["providers"].pop("oa")
        for model in data["models"].values():
            for serving in model["serve"]:
                serving["provider"] = name if serving["provider"] == "oa" else serving["provider"]
    elif where == "model id":
        data["models"]["openai/alpha"]["serve"][0]["model_id"] = name
    elif where == "vendor":
        data["models"]["openai/alpha"]["vendor"] = name
    elif where == "model slug":
        data["models"][f"openai/{name}"] = data["models"].pop("openai/alpha")
        data["chain"]["models"][0] = f"openai/{name}"
    else:
        data["redis"]["namespace"] = name
    return data


WHERE = ["provider", "model id", "vendor", "model slug", "namespace"]


@pytest.mark.parametrize("name", TRICKY, ids=list(TRICKY))
@pytest.mark.parametrize("where", WHERE)
def test_a_tricky_name_in_the_configuration_is_refused_naming_the_key(
    name: str, where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RELEVO_TEST_KEY", "k")
    data = config_with(TRICKY[name], where)
    if name in ALLOWED.get(where, ()):
        load_settings(data=data)
        return
    with pytest.raises(ConfigError) as caught:
        load_settings(data=data)
    section = {"provider": "providers", "namespace": "redis.namespace"}.get(where, "models")
    assert section in str(caught.value)


def test_names_the_fleet_uses_are_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RELEVO_TEST_KEY", "k")
    data = config_with("llama3.1:8b-instruct", "model id")
    assert (
        load_settings(data=data).models["openai/alpha"].serve[0].model_id.endswith(":8b-instruct")
    )
    assert parse_turn_request(payload(tenant_id="acme-corp_2.eu")).tenant_id == "acme-corp_2.eu"
