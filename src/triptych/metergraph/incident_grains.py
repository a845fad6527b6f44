"""What Metergraph's incident detectors judge over: the rollup grains (provider/model/environment hour by
hour, route/environment day by day) and the ingest batches, an episode's stable id, a series' label, and
the ISO times incidents show. Split from ``incidents.py`` (issue 29).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime

from triptych.metergraph.detectors import IncidentSettings

HOUR_MS = 3_600_000
DAY_MS = 86_400_000


@dataclass(frozen=True, slots=True)
class Grain:
    name: str
    table: str
    width_ms: int
    dims: tuple[str, ...]
    pricing: bool

    def baseline(self, s: IncidentSettings) -> int:
        return s.baseline_hours if self.width_ms == HOUR_MS else s.baseline_days


GRAINS = (
    Grain("model", "rollup_hourly_coarse", HOUR_MS, ("provider", "model", "environment"), True),
    Grain("route", "rollup_daily", DAY_MS, ("route", "environment"), False),
)
INGEST_GRAIN = "ingest"


def iso(ms: int | None) -> str | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, UTC).isoformat()


def incident_id(workspace: str, kind: str, grain: str, series: str, opened_bucket: int) -> str:
    """Stable: the same episode gets the same id on every worker."""
    digest = hashlib.sha256(f"{workspace}\x00{kind}\x00{grain}\x00{series}\x00{opened_bucket}".encode())
    return "inc_" + digest.hexdigest()[:24]


def label(grain: Grain, key: dict[str, str | None]) -> str:
    if grain.name == "model":
        name = f"{key['provider'] or '(unknown)'}/{key['model'] or '(unknown)'}"
    else:
        name = f"route {key['route']}"
    return name + (f" ({key['environment']})" if key["environment"] else "")
