"""Who is calling: a user (bearer JWT or PAT), an app key, or nobody yet.

``HadronCaller`` is built once per HTTP request by ``authenticator()``: a bearer starting with
``hak_`` is an app key (looked up hashed), any other bearer is a JWT verified by ``core.auth``.
With auth disabled and no bearer, the caller is the user ``local``; with auth enabled and no
bearer, the caller is anonymous and may only call ``hadron_server_info``.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from triptych.core.auth import TokenVerifier, bearer_token
from triptych.core.config import Settings
from triptych.core.errors import AuthRequired
from triptych.hadron.domain.loc import user_urn
from triptych.hadron.domain.model import App, User
from triptych.hadron.store import TenancyStore

APP_KEY_PREFIX = "hak_"
LOCAL_HANDLE = "local"


@dataclass(frozen=True, slots=True)
class HadronCaller:
    kind: Literal["user", "app", "anonymous"]
    handle: str  # the JWT subject, or the app's URN for an app key
    user: User | None = None  # None for an app key, an anonymous caller, or an unknown subject
    app: App | None = None  # the app an app key belongs to

    @property
    def key(self) -> str:
        """Stable identity of the principal, for session ownership."""
        return f"{self.kind}:{self.app.id if self.app else self.handle}"

    @property
    def actor(self) -> str:
        """How revisions record this caller."""
        if self.kind == "app" and self.app is not None:
            return self.app.urn
        return user_urn(self.handle)


ANONYMOUS = HadronCaller("anonymous", "anonymous")


def new_app_key() -> str:
    return APP_KEY_PREFIX + secrets.token_urlsafe(32)


Authenticate = Callable[[str | None], HadronCaller]


def authenticator(settings: Settings, tenancy: TenancyStore) -> Authenticate:
    """Turn an Authorization header into a caller; raise ``AuthRequired`` (HTTP 401) for a bad one."""
    verifier: TokenVerifier | None = None
    if settings.jwt_secret or settings.jwt_public_key or settings.jwt_jwks_url:
        verifier = TokenVerifier(settings)

    def user_caller(handle: str) -> HadronCaller:
        return HadronCaller("user", handle, user=tenancy.user_by_handle(handle))

    def authenticate(header: str | None) -> HadronCaller:
        token = bearer_token(header)
        if token is None:
            if header:
                raise AuthRequired("malformed Authorization header: send 'Bearer <token>'")
            return ANONYMOUS if settings.auth_enabled else user_caller(LOCAL_HANDLE)
        if token.startswith(APP_KEY_PREFIX):
            app = tenancy.app_for_key(token)
            if app is None:
                raise AuthRequired("unknown or revoked app key")
            return HadronCaller("app", app.urn, app=app)
        if verifier is None:
            raise AuthRequired("no JWT key is configured on this server; use an app key")
        return user_caller(verifier.verify(token).user)

    return authenticate
