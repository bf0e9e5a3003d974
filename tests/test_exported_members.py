"""Each package's public surface is the set we mean, pinned here name by name.

A name joins a surface on purpose: add it here in the same change. Internals (key
builders, script plumbing, bounds used only inside a package) are imported from their
modules by the tests that need them.
"""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

_ERRORS = (
    "AuthFailed ConfigError ConnectionFailed ContextTooLong DeadlineExceeded FirstByteTimeout "
    "InputError InvalidRequest MalformedResponse ModelNotFound Overloaded ProviderError "
    "QuotaExhausted RateLimited RelevoError ResponseTimeout ServerError TurnFailed"
)
SURFACES: dict[str, str] = {
    "worker": _ERRORS
    + " Attempt AttemptOutcome Chain Guard Message OpenGuard Reasoning Reply Settings Status Tool"
    " ToolCall TurnRequest TurnResult Usage load_settings make_client parse_turn_request",
    "worker.adapters": "ADAPTERS Adapter AnthropicAdapter BedrockAdapter Completion Event"
    " GeminiAdapter OpenAIAdapter OpenAIResponsesAdapter ProviderCall TextDelta ToolCallDelta"
    " VertexAdapter build_adapter make_client reasoning_family",
    "worker.turn": "RULES Chain Decision Rule rule_for",
    "worker.guard": "Admission Availability Charge Conclusion FleetView Guard HedgeBook"
    " LocalHedges OpenGuard RedisGuard Refusal Signal Target hedge_book open_guard",
    "worker.guard.testing": "ScriptedGuard",
    "worker.fleet": "AsyncTurnHandle FleetUnavailable Producer StreamEvent StreamRestarted"
    " TurnHandle TurnNotSent TurnRecorded TurnStore TurnTimeout UnknownTurn Unreadable"
    " enqueue_turn make_app",
    "worker.fleet.testing": "InProcessRedis InProcessWorker StubFleet stub_fleet",
    "worker.observability": "Redactor TurnMetrics configure_logging configure_tracing redact_text",
    "worker.simulator": "CallOutcome Fault RequestRecord Simulator SimulatorClient serve",
    "worker.cli": "main",
    "worker.frameworks": "Engine InProcess OnDegraded ThroughFleet TurnNotAnswered TurnOptions"
    " answer",
    "worker.frameworks.pydantic_ai": "PydanticAIInputError RelevoModel TurnNotAnsweredError",
    "worker.frameworks.openai_agents": "AgentsInputError AgentsTurnNotAnswered RelevoModel"
    " RelevoProvider",
    "worker.console": "RunningConsole build_app running_console serve_console",
    "worker.demo": "run_demo",
    "breakers": "FORBIDDEN_ERRORS STORE_ERRORS BreakerState BreakersError Cooldown"
    " CooldownPolicy CooldownReport Entry Exhausted ExhaustedReport FleetBreakers FleetReport"
    " FleetState Gone HedgeStore HeldTurn HeldTurns InvalidNameError InvalidPolicyError"
    " KillSwitch KillSwitchState Operators Outcome Pair Policy ReadProblem ResilientBreakers"
    " ScopeReport"
    " ScopeState StoreForbiddenError StoreUnavailableError Transition TransitionKind"
    " UnknownScopeError Verdict connect in_memory validate_name",
    "breakers.testing": "ManualClock",
    "budgets": "MAX_WEIGHT MICROS_PER_DOLLAR Attribution BudgetError BudgetReport Handoff Handoffs"
    " InvalidAmountError InvalidNameError Ledger Limits MigrationReport OutputEvidence"
    " PeriodReport Refusal RefusalReason Release Reservation Route Routes Settlement Share Shares"
    " UnknownTenantError check_label_key check_provider check_tenant"
    " cost_micros encode_labels format_micros migrate_keys old_keys_present parse_dollars"
    " percentile worst_case_micros",
    "budgets.testing": "ManualClock",
    "rediskit": "BLIPS DOWN FAILED FORBIDDEN_ERRORS NAMESPACE REFUSED STORE_ERRORS LuaScripts"
    " ManualClock NameRule Parse StoreError StoreForbiddenError StoreUnavailableError backoff_s"
    " check_name hash_tag raise_if_error raise_if_forbidden read_clock refused store_errors text",
}


@pytest.mark.parametrize("name", sorted(SURFACES))
def test_the_public_surface_is_the_intended_one(name: str) -> None:
    package = importlib.import_module(name)
    assert sorted(package.__all__) == sorted(SURFACES[name].split())
    for member in package.__all__:
        assert hasattr(package, member), f"{name}.{member}"


@pytest.mark.parametrize(
    ("imported", "above"),
    [
        ("breakers, budgets", ("worker", "celery", "httpx")),  # never worker, nor its engines
        ("rediskit", ("worker", "breakers", "budgets")),  # the kit is below all three
    ],
)
def test_a_package_imports_nothing_above_it(imported: str, above: tuple[str, ...]) -> None:
    code = (
        f"import sys, {imported}; "
        f"bad = [m for m in sys.modules if m.split('.')[0] in {above!r}]; "
        "print(','.join(bad))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == ""
