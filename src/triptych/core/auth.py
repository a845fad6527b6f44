"""Bearer tokens -> ``Principal``: Triptych's one JWT format, shared by Metronix and Hadron (one
``triptych token`` mints for both; Hadron reads the subject, Metronix also the role and workspace grants,
whose rules are in ``metronix.access``).

JWTs carry the upstream Metronix claims: ``sub``, ``role`` (admin | editor | viewer),
``workspace_ids``, ``iat``, ``exp``. HS256 with the configured secret, or RS256 with a PEM public key
or a JWKS URL. ``alg: none`` and every algorithm not configured are refused.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import jwt

from triptych.core.config import Settings
from triptych.core.errors import AuthRequired

Role = Literal["admin", "editor", "viewer"]
ROLES: tuple[Role, ...] = ("admin", "editor", "viewer")


@dataclass(frozen=True, slots=True)
class Principal:
    user: str
    role: Role
    workspace_ids: tuple[str, ...] = ()
    # Auth disabled (local development, stdio): every workspace, every operation.
    local: bool = False
    claims: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def all_workspaces(self) -> bool:
        return self.local or (self.role == "admin" and not self.workspace_ids)

    def can_access(self, workspace_id: str) -> bool:
        return self.all_workspaces or workspace_id in self.workspace_ids

    @property
    def can_write(self) -> bool:
        return self.local or self.role in ("admin", "editor")


def local_principal() -> Principal:
    return Principal(user="local", role="admin", local=True)


class TokenVerifier:
    """Verifies bearer JWTs against the configured keys; raises ``AuthRequired`` on any failure."""

    def __init__(self, settings: Settings) -> None:
        self._secret = settings.jwt_secret
        self._public_key = _read_key(settings.jwt_public_key)
        self._audience = settings.jwt_audience
        self._jwks = jwt.PyJWKClient(settings.jwt_jwks_url) if settings.jwt_jwks_url else None
        if not (self._secret or self._public_key or self._jwks):
            raise ValueError(
                "auth is enabled but no key is configured: set TRIPTYCH_JWT_SECRET (HS256), "
                "TRIPTYCH_JWT_PUBLIC_KEY or TRIPTYCH_JWT_JWKS_URL (RS256)"
            )

    def verify(self, token: str) -> Principal:
        try:
            header = jwt.get_unverified_header(token)
            alg = header.get("alg")
            key: Any
            if alg == "HS256" and self._secret:
                key = self._secret
            elif alg == "RS256" and self._public_key:
                key = self._public_key
            elif alg == "RS256" and self._jwks is not None:
                key = self._jwks.get_signing_key_from_jwt(token).key
            else:
                raise AuthRequired(f"token algorithm {alg!r} is not accepted")
            claims = jwt.decode(
                token,
                key,
                algorithms=[alg],
                audience=self._audience,
                options={"require": ["sub", "exp"], "verify_aud": self._audience is not None},
            )
        except AuthRequired:
            raise
        except jwt.ExpiredSignatureError as exc:
            raise AuthRequired("token expired", hint="Mint a fresh token: `triptych token --help`") from exc
        except (jwt.PyJWTError, ValueError) as exc:
            raise AuthRequired(f"invalid token: {exc}") from exc
        role = claims.get("role", "viewer")
        if role not in ROLES:
            raise AuthRequired(f"token role {role!r} is not one of {', '.join(ROLES)}")
        workspaces = claims.get("workspace_ids") or []
        if not isinstance(workspaces, list) or not all(isinstance(w, str) for w in workspaces):
            raise AuthRequired("token claim workspace_ids must be a list of strings")
        return Principal(user=str(claims["sub"]), role=role, workspace_ids=tuple(workspaces), claims=claims)


def bearer_token(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


def mint_token(
    secret: str,
    user: str,
    role: Role,
    workspaces: list[str],
    ttl_seconds: int = 86_400,
    now: int | None = None,
) -> str:
    issued = int(time.time()) if now is None else now
    claims = {
        "sub": user,
        "role": role,
        "workspace_ids": workspaces,
        "iat": issued,
        "exp": issued + ttl_seconds,
    }
    return jwt.encode(claims, secret, algorithm="HS256")


def _read_key(value: str | None) -> str | None:
    if not value:
        return None
    if "-----BEGIN" in value:
        return value
    return Path(value).read_text()
