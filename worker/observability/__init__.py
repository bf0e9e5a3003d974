"""What a turn leaves behind for people: logs, redaction, metrics, the fallback alert, traces."""

from worker.observability.logs import configure_logging
from worker.observability.metrics import TurnMetrics
from worker.observability.redact import Redactor, redact_text
from worker.observability.tracing import configure_tracing

__all__ = ["Redactor", "TurnMetrics", "configure_logging", "configure_tracing", "redact_text"]
