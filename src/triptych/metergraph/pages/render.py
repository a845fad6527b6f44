"""HTML for the app pages: Jinja2 with autoescaping on for every template, and the headers every page
carries (no caching, no framing, scripts only from this server)."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from markupsafe import Markup
from starlette.responses import HTMLResponse

if TYPE_CHECKING:
    from jinja2 import Environment

HERE = Path(__file__).resolve().parent
STATIC_DIR = HERE / "static"

# Only this server's scripts and styles run; chart data travels in a non-executable JSON block.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",  # no-referrer would make form posts send Origin: null
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}


def money(value: Any) -> str:
    if value is None:
        return "—"
    number = float(value)
    return f"${number:,.4f}" if abs(number) < 1 else f"${number:,.2f}"


def count(value: Any) -> str:
    return "—" if value is None else f"{int(value):,}"


def millis(value: Any) -> str:
    return "—" if value is None else f"{float(value):,.0f} ms"


def percent(value: Any) -> str:
    return "—" if value is None else f"{float(value) * 100:.1f}%"


def json_block(value: Any) -> Markup:
    """JSON safe inside ``<script type="application/json">``: no ``<``, ``>`` or ``&`` can end the block."""
    text = json.dumps(value, ensure_ascii=True, separators=(",", ":"), default=str)
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return Markup(text)


@functools.cache
def _environment() -> Environment:
    # Built, and jinja2 imported, at the first page served: 0.04 s of CPU a server start that serves no
    # page need not pay (docs/decisions/0310).
    from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(money=money, count=count, millis=millis, percent=percent, json_block=json_block)
    return env


def page(template: str, status: int = 200, **context: Any) -> HTMLResponse:
    html = _environment().get_template(template).render(**context)
    return HTMLResponse(html, status_code=status, headers=dict(SECURITY_HEADERS))
