"""Metergraph settings, read from the environment (upstream self-hosted names where they exist)."""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import AliasChoices, Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


class MetergraphSettings(BaseSettings):
    model_config = SettingsConfigDict(extra="ignore", populate_by_name=True)

    max_rows: int = Field(5000, ge=1, validation_alias=AliasChoices("MG_MAX_ROWS", "max_rows"))
    max_body_bytes: int = Field(
        8 * 1024 * 1024, ge=1024, validation_alias=AliasChoices("MG_MAX_BODY_BYTES", "max_body_bytes")
    )
    # Static tokens, as in the upstream self-hosted server: ingest (app) and read (agent) tokens.
    tokens: Annotated[list[str], NoDecode] = Field(
        default_factory=list, validation_alias=AliasChoices("MG_TOKENS", "tokens")
    )
    agent_tokens: Annotated[list[str], NoDecode] = Field(
        default_factory=list, validation_alias=AliasChoices("MG_AGENT_TOKENS", "agent_tokens")
    )
    # The workspace static tokens act on, and the role static agent tokens carry.
    static_workspace: str = Field(
        "default",
        validation_alias=AliasChoices("MG_WORKSPACE", "TRIPTYCH_DEFAULT_WORKSPACE", "static_workspace"),
    )
    static_agent_role: str = Field(
        "metadata", validation_alias=AliasChoices("MG_AGENT_TOKENS_ROLE", "static_agent_role")
    )
    session_ttl_seconds: int = Field(
        3600, ge=60, validation_alias=AliasChoices("MG_SESSION_TTL_SECONDS", "session_ttl_seconds")
    )
    # Agent reads per key and minute (0: unlimited).
    agent_rate_per_minute: int = Field(
        600, ge=0, validation_alias=AliasChoices("MG_AGENT_RATE_PER_MINUTE", "agent_rate_per_minute")
    )
    # The ClickHouse engine for calls and rollups (issue 17): unset keeps the embedded SQLite engine.
    clickhouse_url: str | None = Field(
        None, validation_alias=AliasChoices("TRIPTYCH_METERGRAPH_CLICKHOUSE_URL", "clickhouse_url")
    )
    # How many days calls (their metadata, content and rollups) are kept, on either engine: reads never
    # reach further back, the embedded engine deletes older calls, ClickHouse expires them by TTL.
    # Unset: the embedded engine keeps everything, ClickHouse ten years (its TTL needs a number).
    # MG_RETENTION_DAYS is the upstream self-hosted server's name; the ClickHouse-only name still works.
    retention_days: int | None = Field(
        None,
        ge=1,
        validation_alias=AliasChoices(
            "MG_RETENTION_DAYS", "TRIPTYCH_METERGRAPH_RETENTION_DAYS",
            "TRIPTYCH_METERGRAPH_CLICKHOUSE_RETENTION_DAYS", "retention_days", "clickhouse_retention_days",
        ),
    )  # fmt: skip
    # The embedded engine folds committed calls into its rollups in the background once this many are
    # pending, or once no ingest batch came for this long (reads fold what is still pending first).
    rollup_fold_rows: int = Field(
        50_000, ge=1, validation_alias=AliasChoices("MG_ROLLUP_FOLD_ROWS", "rollup_fold_rows")
    )
    rollup_fold_idle_ms: int = Field(
        500, ge=1, validation_alias=AliasChoices("MG_ROLLUP_FOLD_IDLE_MS", "rollup_fold_idle_ms")
    )
    # The public address app links start with (``app_url``); unset: the server's own http://host:port.
    public_url: str | None = Field(
        None, validation_alias=AliasChoices("MG_PUBLIC_URL", "TRIPTYCH_PUBLIC_URL", "public_url")
    )
    # Signs the app's sign-in cookies; unset: a random secret kept in the data directory (0600).
    web_secret: str | None = Field(None, validation_alias=AliasChoices("MG_WEB_SECRET", "web_secret"))
    web_session_seconds: int = Field(
        8 * 3600, ge=60, validation_alias=AliasChoices("MG_WEB_SESSION_SECONDS", "web_session_seconds")
    )
    # Bodies of the stateless MCP endpoint (contract: 1 MiB).
    mcp_max_body_bytes: int = 1024 * 1024

    @field_validator("tokens", "agent_tokens", mode="before")
    @classmethod
    def _split_csv(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("public_url")
    @classmethod
    def _public_url(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        parts = urlsplit(value.strip())
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
            raise ValueError("MG_PUBLIC_URL must be an absolute http(s) URL without a query or fragment")
        if parts.username or parts.password:
            raise ValueError("MG_PUBLIC_URL must not carry credentials")
        return value.strip().rstrip("/")

    @field_validator("static_agent_role")
    @classmethod
    def _role(cls, value: str) -> str:
        if value not in ("metadata", "debug", "replay"):
            raise ValueError("MG_AGENT_TOKENS_ROLE must be metadata, debug or replay")
        return value


def load_metergraph_settings(**overrides: Any) -> MetergraphSettings:
    """Settings from the environment, explicit values taking precedence."""
    return MetergraphSettings(**{k: v for k, v in overrides.items() if v is not None})
