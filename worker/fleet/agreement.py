"""The fleet settings every producer and worker must share: broker, fair dispatch, namespace.

Each process states them where the others read them: a worker in its heartbeat
(`worker.fleet.heartbeat`), a producer in each turn's message (`FLEET_HEADER`). A process
that meets other ones (a turn it runs, another live worker's heartbeat, the workers a
producer finds as it starts) warns at once, naming both sides, and counts it. Nothing is
refused: during a switch the two kinds run side by side on purpose, and the fleet serves
both (a worker with fair dispatch off still drains the fair queue; a dispatcher takes
either broker's message format, `worker.fleet.envelope`). docs/deploy.md gives the order
of a switch.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from worker.settings import Settings

__all__ = ["FLEET_HEADER", "Agreement", "FleetShape"]

log = structlog.get_logger("relevo.fleet")
# The message header a producer states its fleet settings in: "<broker>|<fair|fifo>|<namespace>".
FLEET_HEADER = "relevo_fleet"
# One warning per difference and source kind in this long, not one per turn.
_WARN_EVERY_S = 60.0
_BROKERS = ("redis", "rabbitmq")


@dataclass(frozen=True, slots=True)
class FleetShape:
    """The settings that must match across a fleet."""

    broker: str  # "redis" or "rabbitmq"
    fair: bool
    namespace: str

    @classmethod
    def of(cls, settings: Settings) -> FleetShape:
        broker = "rabbitmq" if settings.broker.rabbitmq else "redis"
        return cls(broker, settings.fairness.enabled, settings.redis.namespace)

    def header(self) -> str:
        return f"{self.broker}|{'fair' if self.fair else 'fifo'}|{self.namespace}"

    @classmethod
    def parse(cls, raw: object) -> FleetShape | None:
        """The shape a header states; None for none (an older producer's) or another form."""
        if not isinstance(raw, str):
            return None
        parts = raw.split("|", 2)
        if (
            len(parts) != 3
            or parts[0] not in ("redis", "rabbitmq")
            or parts[1] not in ("fair", "fifo")
        ):
            return None
        return cls(parts[0], parts[1] == "fair", parts[2])

    def differences(self, other: FleetShape) -> list[str]:
        """The names of the settings that differ: "broker", "fairness", "namespace"."""
        pairs = (
            ("broker", self.broker != other.broker),
            ("fairness", self.fair != other.fair),
            ("namespace", self.namespace != other.namespace),
        )
        return [name for name, differs in pairs if differs]


class Agreement:
    """This process's fleet settings, compared with the ones others state."""

    def __init__(self, own: FleetShape, *, on_differ: Callable[[str], None] | None = None) -> None:
        """`on_differ`: called with the name of each setting found different (a counter)."""
        self.own = own
        self.on_differ = on_differ
        self._warned: dict[tuple[str, FleetShape], float] = {}

    def check_release(self, version: str, oldest: str, *, where: str) -> bool:
        """Warn (at most once a minute per release) if a live process runs a release older
        than `[worker] oldest_release` says is left: it may refuse what this one writes."""
        if _release(version) >= _release(oldest):
            return False
        if self.on_differ is not None:
            self.on_differ("oldest_release")
        now = time.monotonic()
        seen = ("release", FleetShape(version, False, ""))
        if now - self._warned.get(seen, -_WARN_EVERY_S) >= _WARN_EVERY_S:
            self._warned[seen] = now
            log.warning(
                "fleet.older_release",
                version=version,
                oldest_release=oldest,
                where=where,
                detail="a process of an older release than [worker] oldest_release is live: "
                "it may refuse the turns and results this one writes (docs/deploy.md)",
            )
        return True

    def check(self, other: FleetShape | None, source: str, *, where: str) -> list[str]:
        """Warn (at most once a minute per kind of `source` and settings) if `other`
        differs from this process's; returns the settings that differ."""
        if other is None:
            return []
        differ = self.own.differences(other)
        if not differ:
            return []
        for name in differ:
            if self.on_differ is not None:
                self.on_differ(name)
        now = time.monotonic()
        if now - self._warned.get((source, other), -_WARN_EVERY_S) >= _WARN_EVERY_S:
            if len(self._warned) > 1000:
                self._warned.clear()
            self._warned[(source, other)] = now
            log.warning(
                "fleet.settings_differ",
                differ=differ,
                ours=self.own.header(),
                theirs=other.header(),
                source=source,
                where=where,
                detail="producers and workers must share broker, fair dispatch and "
                "namespace; docs/deploy.md says how to switch with turns in flight",
            )
        return differ


def _release(version: str) -> tuple[int, ...]:
    """A release's number as a tuple ("0.2.0.dev3" is (0, 2, 0)); (0,) for none."""
    found = re.match(r"\d+(?:\.\d+)*", version)
    return tuple(int(n) for n in found.group().split(".")) if found else (0,)
