"""The app's HTTP routes: sign-in and sign-out, the vendored chart library, and the pages app links open.

Every page is a GET that reads through the same services as the tools, with the signed-in key's
principal: its workspace, role and environment allowlist decide what shows. A page of another workspace
says so and shows nothing of it; a content page refuses a metadata-role key.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import FileResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from triptych.core.errors import TriptychError
from triptych.metergraph.errors import Unauthenticated
from triptych.metergraph.keys import AgentPrincipal, token_hash
from triptych.metergraph.links import APP_PREFIX, analysis_path, usage_path, webhooks_path
from triptych.metergraph.pages import report_view, usage_view
from triptych.metergraph.pages.render import STATIC_DIR, page
from triptych.metergraph.pages.session import COOKIE, CookieSigner, load_secret
from triptych.metergraph.pages.webhooks_view import webhooks_page
from triptych.metergraph.service import Metergraph
from triptych.metergraph.web import BodyTooLarge, read_body

SIGN_IN = APP_PREFIX + "/sign-in"
SIGN_OUT = APP_PREFIX + "/sign-out"
STATIC = APP_PREFIX + "/static"
STATIC_FILES = {
    "uPlot.iife.min.js": "text/javascript",
    "uPlot.min.css": "text/css",
    "uPlot.LICENSE": "text/plain",
    "charts.js": "text/javascript",
    "app.css": "text/css",
}
_FORM_LIMIT = 8 * 1024
ROLE_NAMES = {"metadata": "Metadata", "debug": "Debug", "replay": "Replay"}

# A page body: (mg, principal, request) -> (template, context); runs in a worker thread.
PageBody = Callable[[Metergraph, AgentPrincipal, Request], tuple[str, dict[str, Any]]]


def _safe_next(value: str | None) -> str | None:
    """Only a path of this app: never another origin (``//host``, ``/\\host``) or another door."""
    if not value or len(value) > 2000 or not value.startswith(APP_PREFIX + "/"):
        return None
    if value.startswith("//") or "\\" in value or urlsplit(value).netloc:
        return None
    return value


def _same_origin(request: Request, public: str | None) -> bool:
    """A sign-in or sign-out form posts from this server's own pages (no login CSRF): its Origin is the
    host the request came to, or the public address (a reverse proxy may rewrite Host)."""
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        return origin is None  # an opaque ("null") origin is refused, a missing one is a plain client
    netloc = urlsplit(origin).netloc
    return netloc == request.headers.get("host", "") or (
        public is not None and netloc == urlsplit(public).netloc
    )


class App:
    def __init__(self, mg: Metergraph, data_dir: Path) -> None:
        self.mg = mg
        self.cookies = CookieSigner(
            load_secret(mg.settings.web_secret, data_dir), mg.settings.web_session_seconds
        )

    # -- who is signed in ------------------------------------------------------------------------

    def principal(self, request: Request) -> AgentPrincipal | None:
        key_hash = self.cookies.read(request.cookies.get(COOKIE), time.time())
        if key_hash is None:
            return None
        try:
            return self.mg.keys.agent_by_hash(key_hash)
        except TriptychError:
            return None  # a revoked key or an app token: signed out

    def chrome(self, principal: AgentPrincipal | None) -> dict[str, Any]:
        """What the page frame shows: who is signed in and the pages they can open."""
        ws = principal.workspace if principal else None
        return {
            "signed_in": principal is not None,
            "workspace": ws,
            "role": ROLE_NAMES.get(principal.role, principal.role) if principal else None,
            "environments": list(principal.environments or []) if principal else [],
            "nav": [
                ("Usage", usage_path(ws)),
                ("Analysis", analysis_path(ws)),
                ("Webhooks", webhooks_path(ws)),
            ]
            if ws is not None
            else [],
            "sign_out": SIGN_OUT,
            "can_read_content": principal is not None and principal.has("agent:read"),
        }

    # -- doors -----------------------------------------------------------------------------------

    async def home(self, request: Request) -> Response:
        principal = await anyio.to_thread.run_sync(self.principal, request)
        if principal is None:
            return RedirectResponse(SIGN_IN, 303)
        return RedirectResponse(usage_path(principal.workspace), 303)

    async def sign_in_form(self, request: Request) -> Response:
        nxt = _safe_next(request.query_params.get("next"))
        return page("sign_in.html", **self.chrome(None), next=nxt or "", error=None)

    async def sign_in(self, request: Request) -> Response:
        if not _same_origin(request, self.mg.links.base):
            return page("message.html", 403, **self.chrome(None), title="Sign-in refused",
                        message="The sign-in form must be sent from this server's own page.")  # fmt: skip
        try:
            raw = await read_body(request, _FORM_LIMIT)
        except BodyTooLarge:
            return page("message.html", 413, **self.chrome(None), title="Sign-in refused",
                        message="The form is too large.")  # fmt: skip
        try:
            form = parse_qs(raw.decode("utf-8", "replace"), max_num_fields=4)
        except ValueError:  # more fields than the form has
            return page(
                "sign_in.html", 400, **self.chrome(None), next="", error="The form has unexpected fields."
            )
        key = (form.get("key") or [""])[0].strip()
        nxt = _safe_next((form.get("next") or [""])[0])
        try:
            principal = await anyio.to_thread.run_sync(self.mg.keys.agent, key or None)
        except Unauthenticated:
            return page("sign_in.html", 401, **self.chrome(None), next=nxt or "",
                        error="That key was not accepted: paste a coding-agent key of this server.")  # fmt: skip
        except TriptychError as exc:
            return page("sign_in.html", 403, **self.chrome(None), next=nxt or "", error=exc.message)
        response = RedirectResponse(nxt or usage_path(principal.workspace), 303)
        response.set_cookie(
            COOKIE,
            self.cookies.issue(token_hash(key), time.time()),
            max_age=self.cookies.ttl,
            path=APP_PREFIX,
            httponly=True,
            # Lax: a link opened from an agent's chat (a top-level GET) arrives signed in; a cross-site
            # POST never carries the cookie, and every page is a read.
            samesite="lax",
            # Secure over HTTPS, including behind a proxy that ends TLS for a public https:// address.
            secure=request.url.scheme == "https" or (self.mg.links.base or "").startswith("https://"),
        )
        return response

    async def sign_out(self, request: Request) -> Response:
        if not _same_origin(request, self.mg.links.base):
            return page("message.html", 403, **self.chrome(None), title="Sign-out refused",
                        message="Sign out from this server's own page.")  # fmt: skip
        response = RedirectResponse(SIGN_IN, 303)
        response.delete_cookie(COOKIE, path=APP_PREFIX)
        return response

    async def static(self, request: Request) -> Response:
        name = request.path_params["name"]
        media = STATIC_FILES.get(name)
        if media is None:
            return page("message.html", 404, **self.chrome(None), title="Not found", message="No such file.")
        headers = {"Cache-Control": "public, max-age=3600", "X-Content-Type-Options": "nosniff"}
        return FileResponse(STATIC_DIR / name, media_type=media, headers=headers)

    async def not_found(self, request: Request) -> Response:
        principal = await anyio.to_thread.run_sync(self.principal, request)
        return page("message.html", 404, **self.chrome(principal), title="Not found",
                    message="No page here. The links the Metergraph tools return open the app's pages.")  # fmt: skip

    def workspace_page(
        self, body: PageBody, content: bool = False
    ) -> Callable[[Request], Awaitable[Response]]:
        """A page of one workspace: signed in, that workspace, the role allowed, then ``body``."""

        async def endpoint(request: Request) -> Response:
            workspace = request.path_params["workspace"]
            principal = await anyio.to_thread.run_sync(self.principal, request)
            if principal is None:
                target = quote(
                    request.url.path + (f"?{request.url.query}" if request.url.query else ""), safe=""
                )
                return RedirectResponse(f"{SIGN_IN}?next={target}", 303)
            chrome = self.chrome(principal)
            if principal.workspace != workspace:
                return page("message.html", 403, **chrome, title="This link belongs to another workspace",
                            message=f"The link opens workspace “{workspace}”, and you are signed in to "
                                    f"“{principal.workspace}”. Sign out and sign in with a key of that "
                                    "workspace to open it.")  # fmt: skip
            if content and not principal.has("agent:read"):
                return page("message.html", 403, **chrome, title="Your key cannot read this page",
                            message="This page shows retained content (replay evidence). It needs a Debug or "
                                    "Replay key; you are signed in with a Metadata key.")  # fmt: skip
            try:
                template, context = await anyio.to_thread.run_sync(body, self.mg, principal, request)
            except TriptychError as exc:
                if exc.kind == "internal":
                    raise
                status = exc.http_status if exc.http_status in (400, 403, 404, 422, 501) else 400
                return page("message.html", status, **chrome, title="This page cannot be shown",
                            message=exc.message)  # fmt: skip
            return page(template, **chrome, **context)

        return endpoint


def usage_page(mg: Metergraph, principal: AgentPrincipal, request: Request) -> tuple[str, dict[str, Any]]:
    days, by = usage_view.parse_query(request.query_params.get("days"), request.query_params.get("by"))
    data = usage_view.overview(mg.usage, principal, days, by)
    return "usage.html", {**data, "dimensions": usage_view.DIMENSIONS, "day_choices": (1, 7, 30, 90)}


def page_routes(mg: Metergraph, data_dir: Path) -> list[BaseRoute]:
    app = App(mg, data_dir)
    ws = APP_PREFIX + "/w/{workspace}"
    report = ws + "/reports/{analysis_id}"
    workload = report + "/workloads/{workload_id}"
    return [
        Route(APP_PREFIX, app.home, methods=["GET"]),
        Route(APP_PREFIX + "/", app.home, methods=["GET"]),
        Route(SIGN_IN, app.sign_in_form, methods=["GET"]),
        Route(SIGN_IN, app.sign_in, methods=["POST"]),
        Route(SIGN_OUT, app.sign_out, methods=["POST"]),
        Route(STATIC + "/{name}", app.static, methods=["GET"]),
        Route(ws + "/usage", app.workspace_page(usage_page), methods=["GET"]),
        Route(ws + "/analysis", app.workspace_page(report_view.analysis_page), methods=["GET"]),
        Route(ws + "/webhooks", app.workspace_page(webhooks_page), methods=["GET"]),
        Route(report, app.workspace_page(report_view.report_page), methods=["GET"]),
        Route(workload, app.workspace_page(report_view.workload_page), methods=["GET"]),
        Route(workload + "/comparison", app.workspace_page(report_view.comparison_page), methods=["GET"]),
        Route(workload + "/suite", app.workspace_page(report_view.suite_page), methods=["GET"]),
        Route(
            workload + "/opportunities/{opportunity_id}",
            app.workspace_page(report_view.evidence_page, content=True),
            methods=["GET"],
        ),
        Route(APP_PREFIX + "/{rest:path}", app.not_found, methods=["GET"]),
    ]
