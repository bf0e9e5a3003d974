"""One turn: the chain of models, the failure table, retries, capability fit, the report."""

from worker.turn.chain import Chain
from worker.turn.policy import RULES, Decision, Rule, rule_for

__all__ = ["RULES", "Chain", "Decision", "Rule", "rule_for"]
