"""What each setting is, where its value came from: ``triptych config`` prints this, and the test that keeps
the README's configuration tables honest reads the same rows.

A setting's names are the environment variables its settings model accepts (the first is the one we
document; later ones are the upstream products' names). Its source is ``flag`` (a command-line override),
``environment (NAME)`` or ``default``. There is no settings file: the environment is the file
(``systemd``'s ``EnvironmentFile``, Compose's ``env_file``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import AliasChoices
from pydantic_settings import BaseSettings

from triptych.core.pg import redacted

# Names whose values are never printed: credentials, keys, and URLs that may hold a password.
_SECRET = re.compile(r"secret|password|api_key|(^|_)key$|(^|_)token$|^(agent_)?tokens$", re.IGNORECASE)
_URL = re.compile(r"url$", re.IGNORECASE)
_ENV_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")


@dataclass(frozen=True, slots=True)
class SettingRow:
    names: tuple[str, ...]  # environment variables, the documented one first
    value: str  # as printed: secrets masked
    source: str  # "flag", "environment (NAME)" or "default"

    @property
    def name(self) -> str:
        return self.names[0]


@dataclass(frozen=True, slots=True)
class OtherSetting:
    """A variable read outside a settings model (at process start, before any model is built)."""

    name: str
    default: str
    secret: bool = False


def env_names(alias: Any) -> tuple[str, ...]:
    """The environment variables of a field's ``validation_alias`` (field names excluded)."""
    choices = alias.choices if isinstance(alias, AliasChoices) else [alias]
    return tuple(c for c in choices if isinstance(c, str) and _ENV_NAME.match(c))


def _shown(field: str, value: Any) -> str:
    if value is None or value == [] or value == "":
        return "—"
    if _SECRET.search(field):
        return "*** (set)"
    if isinstance(value, list | tuple):
        return ",".join(map(str, value))
    if isinstance(value, float) and value.is_integer():
        return str(int(value))  # as the README and the variable write it: 2048, not 2048.0
    text = str(value)
    return redacted(text) if _URL.search(field) and "://" in text else text


def rows(
    model: BaseSettings, flags: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None
) -> list[SettingRow]:
    """One row per field of ``model`` that has an environment variable."""
    env = {k.upper(): v for k, v in (os.environ if environ is None else environ).items()}
    given = {k for k, v in (flags or {}).items() if v is not None}
    out = []
    for field, info in type(model).model_fields.items():
        names = env_names(info.validation_alias)
        if not names:
            continue
        if field in given:
            source = "flag"
        else:
            found = next((n for n in names if n.upper() in env), None)
            source = f"environment ({found})" if found else "default"
        out.append(SettingRow(names, _shown(field, getattr(model, field)), source))
    return out


def other_rows(others: Iterable[OtherSetting], environ: Mapping[str, str] | None = None) -> list[SettingRow]:
    env = os.environ if environ is None else environ
    out = []
    for other in others:
        if other.name in env:
            shown = "*** (set)" if other.secret else env[other.name] or "—"
            out.append(SettingRow((other.name,), shown, f"environment ({other.name})"))
        else:
            out.append(SettingRow((other.name,), other.default, "default"))
    return out


def table(sections: Sequence[tuple[str, list[SettingRow]]]) -> str:
    """The rows as aligned text, a heading per section."""
    # Aligned on the documented names: one setting with three upstream aliases pushed every value out
    # past column 100; such a row runs over instead.
    width = max((len(r.name) for _, section in sections for r in section), default=0)
    value_width = min(48, max((len(r.value) for _, section in sections for r in section), default=0))
    lines = []
    for heading, section in sections:
        lines.append(f"{heading}:")
        for row in section:
            lines.append(f"  {', '.join(row.names):<{width}}  {row.value:<{value_width}}  {row.source}")
    return "\n".join(lines)
