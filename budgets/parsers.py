"""Parsers of the Lua scripts' raw replies into budgets' types (str or bytes replies alike)."""

from __future__ import annotations

from typing import Any, Literal

from budgets.attribution import attributions
from budgets.errors import UnknownTenantError
from budgets.types import (
    BudgetReport,
    Limits,
    PeriodReport,
    Refusal,
    RefusalReason,
    Release,
    Reservation,
    Settlement,
)
from rediskit import raise_if_error, text

__all__ = ["parse_release", "parse_report", "parse_reservation", "parse_settlement", "reply"]

LimitsSource = Literal["configured", "default", "none"]


def reply(raw: Any) -> list[Any]:
    """The script's reply as a list; an error a pipeline handed over as the reply is raised."""
    return list(raise_if_error(raw))


def parse_reservation(tenant: str, charge_id: str, micros: int, raw: Any) -> Reservation | Refusal:
    fields = reply(raw)
    state, replayed, held, expires, fb, prov, reclaimed, reason, period, left, flight = fields[:11]
    # The room (its 13th) is "" on a replay.
    room = int(fields[12]) if len(fields) > 12 and text(fields[12]) else None
    if text(state) == "refused":
        where = text(period)
        return Refusal(
            reason=RefusalReason(text(reason)),
            tenant=tenant,
            charge_id=charge_id,
            micros=micros,
            period="day" if where == "day" else "month" if where else None,
            remaining_micros=int(left),
            reclaimed=int(reclaimed),
            held_micros=int(flight),
            room_micros=room,
        )
    return Reservation(
        tenant=tenant,
        charge_id=charge_id,
        state="settled" if text(state) == "settled" else "reserved",
        micros=int(held),
        expires_at_ms=int(expires),
        fallback=text(fb) == "1",
        provider=text(prov),
        replayed=bool(int(replayed)),
        reclaimed=int(reclaimed),
        room_micros=room,
    )


def parse_settlement(tenant: str, charge_id: str, raw: Any) -> Settlement:
    replayed, charged, settled, released, fb, prov, day, month, reclaimed, pre, _ = reply(raw)
    return Settlement(
        tenant=tenant,
        charge_id=charge_id,
        charged_micros=int(charged),
        settled_micros=int(settled),
        released_hold_micros=int(released),
        fallback=text(fb) == "1",
        provider=text(prov),
        day=text(day),
        month=text(month),
        replayed=bool(int(replayed)),
        reclaimed=int(reclaimed),
        precharged_micros=int(pre),
    )


def parse_release(tenant: str, charge_id: str, raw: Any) -> Release:
    released, micros, reclaimed, refunded, _ = reply(raw)
    return Release(
        tenant, charge_id, bool(int(released)), int(micros), int(reclaimed), int(refunded)
    )


def parse_report(tenant: str, default: Limits | None, known: bool, raw: Any) -> BudgetReport:
    now, day, month, lim, in_flight, day_flat, month_flat, _ = reply(raw)
    limits, source = _limits(tenant, default, lim, known)
    held, held_fb, reclaimed, held_worst = (int(n) for n in in_flight)
    day_report = _period(text(day), limits.daily_micros, _pairs(day_flat), held)
    month_report = _period(text(month), limits.monthly_micros, _pairs(month_flat), held)
    cap = limits.fallback_cap_micros
    return BudgetReport(
        tenant=tenant,
        limits=limits,
        limits_source=source,
        day=day_report,
        month=month_report,
        reserved_micros=held,
        reserved_fallback_micros=held_fb,
        fallback_remaining_micros=(
            None if cap is None else max(0, cap - day_report.fallback_spent_micros - held_fb)
        ),
        reclaimed_total=reclaimed,
        now_ms=int(now),
        reserved_worst_micros=held_worst,
    )


def _limits(
    tenant: str, default: Limits | None, lim: list[Any], known: bool
) -> tuple[Limits, LimitsSource]:
    daily, monthly, cap, overdraft = lim
    if daily is not None:
        limits = Limits(
            int(daily), int(monthly), None if cap is None else int(cap), int(overdraft or 0)
        )
        return limits, "configured"
    if not known:
        raise UnknownTenantError(
            f"tenant {tenant!r} has no configured limits and no recorded spend"
        )
    if default is not None:
        return default, "default"
    return Limits(0, 0), "none"


def _pairs(flat: list[Any]) -> dict[str, int]:
    return {text(flat[i]): int(flat[i + 1]) for i in range(0, len(flat), 2)}


def _period(period: str, limit: int, spend: dict[str, int], held: int) -> PeriodReport:
    spent = spend.get("spent", 0)
    return PeriodReport(
        period=period,
        limit_micros=limit,
        spent_micros=spent,
        reserved_micros=held,
        remaining_micros=max(0, limit - spent - held),
        fallback_spent_micros=spend.get("fallback", 0),
        fallback_by_provider={
            k[3:]: v for k, v in sorted(spend.items()) if k.startswith("fb:") and v
        },
        reclaimed_charges=spend.get("reclaimed", 0),
        reclaimed_micros=spend.get("reclaimed_micros", 0),
        attribution=attributions(spend),
    )
