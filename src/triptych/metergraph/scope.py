"""The rules every read applies before touching data: time windows, environment scope, metadata filters."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from triptych.metergraph.contract import MAX_DAYS
from triptych.metergraph.errors import ForbiddenError, InvalidArgument
from triptych.metergraph.keys import AgentPrincipal

DAY_MS = 86_400_000
HOUR_MS = 3_600_000
MAX_METADATA_KEYS = 5
MAX_KEY_LEN = 200
MAX_VALUE_LEN = 1000
CREDENTIAL_SUFFIXES = (
    "accesskey", "apikey", "auth", "authorization", "bearer", "clientsecret", "cookie", "credential",
    "credentials", "encryptionkey", "jwt", "passwd", "password", "privatekey", "secret", "secretkey",
    "sessionkey", "signingkey", "token",
)  # fmt: skip
_NOT_ALNUM = re.compile(r"[^a-z0-9]")


@dataclass(frozen=True, slots=True)
class Window:
    since: datetime
    until: datetime
    days: int | None  # set for a days=N window (whole UTC days), None for an exact since/until
    clipped: bool = False  # its start moved up to the retention window's (``clip_to_retention``)

    @property
    def since_ms(self) -> int:
        return int(self.since.timestamp() * 1000)

    @property
    def until_ms(self) -> int:
        # A days=N window covers whole UTC days, today included: calls stamped slightly ahead of the
        # server's clock still count, exactly as the daily rollups count them.
        if self.days is not None:
            return (int(self.until.timestamp() * 1000) // DAY_MS + 1) * DAY_MS
        return int(self.until.timestamp() * 1000)

    def as_dict(self) -> dict[str, object]:
        return {"days": self.days, "since": self.since.isoformat(), "until": self.until.isoformat()}


def days_window(days: int, now: datetime) -> Window:
    """Today and the previous ``days - 1`` whole UTC days, up to now."""
    midnight = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return Window(midnight - timedelta(days=days - 1), now, days)


def _parse_instant(value: str, name: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidArgument(f"{name} must be an ISO 8601 timestamp") from None
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


def resolve_window(days: int | None, since: str | None, until: str | None, now: datetime) -> Window:
    if since is None and until is None:
        return days_window(days if days is not None else 7, now)
    if days is not None:
        raise InvalidArgument("pass either days or since/until, not both")
    if since is None or until is None:
        raise InvalidArgument("since and until go together: pass both")
    start, end = _parse_instant(since, "since"), _parse_instant(until, "until")
    if start >= end:
        raise InvalidArgument("since must be before until")
    if end - start > timedelta(days=MAX_DAYS):
        raise InvalidArgument(f"the window must be at most {MAX_DAYS} days")
    return Window(start, end, None)


def clip_to_retention(window: Window, retention_days: int | None, now: datetime) -> Window:
    """The part of ``window`` the retention keeps: no read reaches calls older than ``retention_days``,
    whether or not the engine has deleted them yet (a window wholly older reads nothing)."""
    if retention_days is None:
        return window
    horizon = now - timedelta(days=retention_days)
    if window.since >= horizon:
        return window
    return Window(min(horizon, window.until), window.until, window.days, clipped=True)


def environment_scope(principal: AgentPrincipal, requested: Sequence[str] | None) -> list[str] | None:
    """The environments a read covers; None means all of them, untagged telemetry included.

    A key with an allowlist sees only those environments (never untagged telemetry); asking for any
    other environment is forbidden.
    """
    allowed = principal.environments
    if requested:
        if allowed is not None and any(env not in allowed for env in requested):
            raise ForbiddenError("this key may not read one of the requested environments")
        return list(dict.fromkeys(requested))
    return list(allowed) if allowed is not None else None


def looks_like_credential(key: str) -> bool:
    folded = _NOT_ALNUM.sub("", key.lower())
    return folded.endswith(CREDENTIAL_SUFFIXES)


def check_metadata_key(key: str, what: str = "a metadata key") -> None:
    # Messages never repeat a key or a value the caller sent.
    if not 1 <= len(key) <= MAX_KEY_LEN:
        raise InvalidArgument(f"{what} must be 1 to {MAX_KEY_LEN} characters")
    if looks_like_credential(key):
        raise InvalidArgument(
            f"{what} looks like a credential name and is not eligible for filtering or grouping"
        )


def metadata_pairs(metadata: Mapping[str, object] | None) -> list[tuple[str, str]]:
    """Validated (key, value) filter pairs sorted by key."""
    if metadata is None:
        return []
    if not 1 <= len(metadata) <= MAX_METADATA_KEYS:
        raise InvalidArgument(f"metadata takes 1 to {MAX_METADATA_KEYS} keys")
    pairs: list[tuple[str, str]] = []
    for key, value in metadata.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise InvalidArgument("metadata keys and values must be strings")
        check_metadata_key(key)
        if len(value) > MAX_VALUE_LEN:
            raise InvalidArgument(f"a metadata value must be at most {MAX_VALUE_LEN} characters")
        pairs.append((key, value))
    return sorted(pairs)
