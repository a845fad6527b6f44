"""Metergraph credentials: app tokens ingest, agent keys read, session tokens stand in for app tokens.

Every token is stored as its SHA-256 hash; a presented token is hashed and looked up, and static
tokens (``MG_TOKENS``, ``MG_AGENT_TOKENS``) are compared hash to hash in constant time. Agent keys carry
a role (metadata, debug, replay) and an optional environment allowlist.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from triptych.metergraph.contract import ROLE_SCOPES, ROLES
from triptych.metergraph.errors import BadBatch, ForbiddenError, InvalidArgument, Unauthenticated
from triptych.metergraph.metadata_store import MetadataStore
from triptych.metergraph.settings import MetergraphSettings

APP_PREFIX = "mgapp_"
AGENT_PREFIX = "mgagent_"
SESSION_PREFIX = "mgsess_"
_ENV_MAX = 128


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class AppPrincipal:
    workspace: str
    app: str  # the key id (or "static") the rows are attributed to


@dataclass(frozen=True, slots=True)
class AgentPrincipal:
    workspace: str
    role: str
    key_id: str
    environments: tuple[str, ...] | None = None  # None: unrestricted

    @property
    def scopes(self) -> tuple[str, ...]:
        return ROLE_SCOPES[self.role]

    def has(self, scope: str) -> bool:
        return scope in self.scopes


def normalize_environments(values: Sequence[str] | None) -> tuple[str, ...] | None:
    if not values:
        return None
    cleaned = []
    for value in values:
        if not isinstance(value, str) or not value.strip() or len(value) > _ENV_MAX:
            raise InvalidArgument("environment names must be 1 to 128 characters and not blank")
        if value not in cleaned:
            cleaned.append(value)
    return tuple(cleaned)


class KeyService:
    def __init__(self, store: MetadataStore, settings: MetergraphSettings) -> None:
        self.store = store
        self.settings = settings
        self._static_app = [token_hash(t) for t in settings.tokens]
        self._static_agent = [token_hash(t) for t in settings.agent_tokens]

    # -- minting --------------------------------------------------------------------------------

    def create_app_token(self, workspace: str) -> tuple[str, str]:
        token = APP_PREFIX + secrets.token_urlsafe(32)
        key_id = "app_" + secrets.token_hex(6)
        self.store.insert_key(key_id, workspace, "app", None, None, token_hash(token), _now())
        return key_id, token

    def create_agent_key(
        self, workspace: str, role: str, environments: Sequence[str] | None = None
    ) -> tuple[str, str]:
        if role not in ROLES:
            raise InvalidArgument(f"role must be one of {', '.join(ROLES)}")
        envs = normalize_environments(environments)
        token = AGENT_PREFIX + secrets.token_urlsafe(32)
        key_id = "key_" + secrets.token_hex(6)
        self.store.insert_key(key_id, workspace, "agent", role, envs, token_hash(token), _now())
        return key_id, token

    def open_session(self, app: AppPrincipal, presented: str | None, document: Any) -> tuple[str, int]:
        """``POST /v1/ingest/sessions``: the SDK's handshake document checked, a session minted."""
        if (presented or "").startswith(SESSION_PREFIX):
            raise Unauthenticated("a session token cannot mint another session: send the app token")
        if not isinstance(document, dict) or document.get("protocol_version") != 2:
            raise BadBatch("protocol_version must be 2")
        repository = document.get("repository")
        sdk_version = document.get("sdk_version")
        if not isinstance(repository, str) or not repository.strip() or len(repository) > 512:
            raise BadBatch("repository must be a non-empty string (owner/name)")
        if not isinstance(sdk_version, str) or len(sdk_version) > 64:
            raise BadBatch("sdk_version must be a string")
        return self.create_session(app, repository, sdk_version)

    def create_session(self, app: AppPrincipal, repository: str, sdk_version: str) -> tuple[str, int]:
        token = SESSION_PREFIX + secrets.token_urlsafe(32)
        expires_at = int(time.time()) + self.settings.session_ttl_seconds
        self.store.insert_session(
            token_hash(token), app.workspace, app.app, repository, sdk_version, expires_at
        )
        return token, expires_at

    # -- authenticating -------------------------------------------------------------------------

    def app(self, token: str | None, *, allow_session: bool = True) -> AppPrincipal:
        """The ingesting app of a bearer token (app token, static MG_TOKENS entry or session token)."""
        if not token:
            raise Unauthenticated("missing bearer token: send 'Authorization: Bearer <app token>'")
        hashed = token_hash(token)
        if _static_match(hashed, self._static_app):
            return AppPrincipal(self.settings.static_workspace, "static")
        if token.startswith(SESSION_PREFIX):
            session = self.store.session_by_hash(hashed) if allow_session else None
            if session is None or session["expires_at"] < time.time():
                raise Unauthenticated("invalid or expired session token")
            return AppPrincipal(session["workspace"], session["app"])
        key = self.store.key_by_hash(hashed)
        if key is None or key["kind"] != "app":
            raise Unauthenticated("invalid app token")
        return AppPrincipal(key["workspace"], key["id"])

    def agent(self, token: str | None) -> AgentPrincipal:
        if not token:
            raise Unauthenticated("missing bearer token: send 'Authorization: Bearer <agent key>'")
        return self.agent_by_hash(token_hash(token))

    def agent_by_hash(self, hashed: str) -> AgentPrincipal:
        """The agent of a key's SHA-256 (the app's sign-in cookie carries the hash, never the key)."""
        if _static_match(hashed, self._static_agent):
            return AgentPrincipal(self.settings.static_workspace, self.settings.static_agent_role, "static")
        if _static_match(hashed, self._static_app):
            # As the upstream self-hosted server: an operator's static ingest token also reads, content-free.
            return AgentPrincipal(self.settings.static_workspace, "metadata", "static-ingest")
        key = self.store.key_by_hash(hashed)
        if key is None:
            raise Unauthenticated("invalid agent key")
        if key["kind"] != "agent":
            # An app token can ingest but never read: authenticated, not authorized.
            raise ForbiddenError("app tokens ingest telemetry; reading needs an agent key")
        envs = json.loads(key["environments"]) if key["environments"] else None
        return AgentPrincipal(key["workspace"], key["role"], key["id"], tuple(envs) if envs else None)


def _static_match(hashed: str, candidates: Sequence[str]) -> bool:
    matched = False
    for candidate in candidates:  # every candidate is compared: no early exit
        matched |= hmac.compare_digest(hashed, candidate)
    return matched


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
