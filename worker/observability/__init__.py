"""What a turn leaves behind for people: logs, redaction, metrics, the fallback alert."""

from worker.observability.logs import configure_logging
from worker.observability.metrics import TurnMetrics
from worker.observability.redact import Redactor, redact_text

__all__ = ["Redactor", "TurnMetrics", "configure_logging", "redact_text"]
