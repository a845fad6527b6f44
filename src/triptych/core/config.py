"""Settings, read in one place from the environment (and CLI flags, which override it).

Every setting has a ``TRIPTYCH_`` name; a few also answer to the upstream products' names
(``AUTH_ENABLED``, ``METRONIX_SECRET_KEY``) so an existing deployment's environment works as is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AliasChoices, Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from triptych.core.datadir import default_data_dir


def _alias(*names: str) -> AliasChoices:
    return AliasChoices(*names)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(extra="ignore", populate_by_name=True)

    host: str = Field("127.0.0.1", validation_alias=_alias("TRIPTYCH_HOST", "host"))
    port: int = Field(8000, validation_alias=_alias("TRIPTYCH_PORT", "port"))
    # The platform's user data directory (core/datadir.py): the same wherever a command runs.
    data_dir: Path = Field(
        default_factory=default_data_dir, validation_alias=_alias("TRIPTYCH_DATA_DIR", "data_dir")
    )

    auth_enabled: bool = Field(
        False, validation_alias=_alias("TRIPTYCH_AUTH_ENABLED", "AUTH_ENABLED", "auth_enabled")
    )
    jwt_secret: str | None = Field(
        None, validation_alias=_alias("TRIPTYCH_JWT_SECRET", "METRONIX_SECRET_KEY", "jwt_secret")
    )
    # RS256: a PEM public key (inline or a path to a file) or a JWKS URL.
    jwt_public_key: str | None = Field(
        None, validation_alias=_alias("TRIPTYCH_JWT_PUBLIC_KEY", "jwt_public_key")
    )
    jwt_jwks_url: str | None = Field(None, validation_alias=_alias("TRIPTYCH_JWT_JWKS_URL", "jwt_jwks_url"))
    jwt_audience: str | None = Field(None, validation_alias=_alias("TRIPTYCH_JWT_AUDIENCE", "jwt_audience"))

    # DNS-rebinding guard: Host headers and Origins the MCP endpoints accept.
    allowed_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["127.0.0.1:*", "localhost:*", "[::1]:*"],
        validation_alias=_alias("TRIPTYCH_ALLOWED_HOSTS", "allowed_hosts"),
    )
    allowed_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
        validation_alias=_alias("TRIPTYCH_ALLOWED_ORIGINS", "allowed_origins"),
    )

    # Server mode: Metronix's knowledge base in this PostgreSQL database (with pgvector), shared by every
    # worker; unset, everything stays in the data directory's SQLite files.
    database_url: str | None = Field(None, validation_alias=_alias("TRIPTYCH_DATABASE_URL", "database_url"))

    # Memory for in-process search indexes per worker process, in MB (0: no limit): the knowledge base's
    # vectors and keyword postings, agent memory's and Hadron's per-memory indexes. Beyond it the least
    # recently used workspace or memory is forgotten and loaded again when searched
    # (docs/decisions/0190-index-memory-budget.md).
    index_memory_mb: float = Field(
        2048, ge=0, validation_alias=_alias("TRIPTYCH_INDEX_MEMORY_MB", "index_memory_mb")
    )

    # Server mode on several machines: the other machines' base URLs (comma-separated), to which a request
    # of an MCP session opened on one of them is relayed (peers.py).
    peers: Annotated[list[str], NoDecode] = Field(
        default_factory=list, validation_alias=_alias("TRIPTYCH_PEERS", "peers")
    )

    default_workspace: str = Field(
        "default", validation_alias=_alias("TRIPTYCH_DEFAULT_WORKSPACE", "default_workspace")
    )

    # Embeddings: the bundled local model unless an OpenAI-compatible endpoint is configured.
    embed_url: str | None = Field(None, validation_alias=_alias("TRIPTYCH_EMBED_URL", "embed_url"))
    embed_model: str | None = Field(None, validation_alias=_alias("TRIPTYCH_EMBED_MODEL", "embed_model"))
    embed_api_key: str | None = Field(
        None, validation_alias=_alias("TRIPTYCH_EMBED_API_KEY", "embed_api_key")
    )
    embed_threads: int = Field(0, validation_alias=_alias("TRIPTYCH_EMBED_THREADS", "embed_threads"))
    # Threads for bulk embedding (a document's chunks); 0: all cores but one, so other requests keep one.
    embed_bulk_threads: int = Field(
        0, ge=0, validation_alias=_alias("TRIPTYCH_EMBED_BULK_THREADS", "embed_bulk_threads")
    )

    # Chunking, chosen by the SciFact benchmark (docs/benchmarks.md).
    chunk_tokens: int = Field(200, validation_alias=_alias("TRIPTYCH_CHUNK_TOKENS", "chunk_tokens"))

    log_level: str = Field("info", validation_alias=_alias("TRIPTYCH_LOG_LEVEL", "log_level"))
    # "json": one JSON object per log line, for a log system (core/logs.py).
    log_format: Literal["text", "json"] = Field(
        "text", validation_alias=_alias("TRIPTYCH_LOG_FORMAT", "log_format")
    )
    # A bearer token for GET /metrics; unset, /metrics answers loopback clients only (core/metrics.py).
    metrics_token: str | None = Field(
        None, validation_alias=_alias("TRIPTYCH_METRICS_TOKEN", "metrics_token")
    )

    # MCP sources for metronix_sync (default: <data dir>/.metronix/mcp_servers.json).
    mcp_sources: str | None = Field(None, validation_alias=_alias("TRIPTYCH_MCP_SOURCES", "mcp_sources"))
    sync_timeout: float = Field(30.0, validation_alias=_alias("TRIPTYCH_SYNC_TIMEOUT", "sync_timeout"))
    # The answer endpoint's upstream LLM (any OpenAI-compatible /v1/chat/completions).
    llm_url: str | None = Field(None, validation_alias=_alias("TRIPTYCH_LLM_URL", "llm_url"))
    llm_model: str | None = Field(None, validation_alias=_alias("TRIPTYCH_LLM_MODEL", "llm_model"))
    llm_api_key: str | None = Field(None, validation_alias=_alias("TRIPTYCH_LLM_API_KEY", "llm_api_key"))
    llm_timeout: float = Field(120.0, validation_alias=_alias("TRIPTYCH_LLM_TIMEOUT", "llm_timeout"))
    # Hadron's MCP tool actions (hadron_run_action): the registered sources they may call, comma-separated
    # ("*": every registered source). Empty, the default: no action reaches outside the server.
    hadron_action_sources: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        validation_alias=_alias("TRIPTYCH_HADRON_ACTION_SOURCES", "hadron_action_sources"),
    )

    # Agent memory: the upstream product's variable names.
    memory_session_ttl: int = Field(14_400, validation_alias=_alias("METRONIX_MEMORY_SESSION_TTL"))
    memory_dense_weight: float = Field(0.6, validation_alias=_alias("METRONIX_MEMORY_SEARCH_DENSE_WEIGHT"))
    memory_graph_weight: float = Field(0.3, validation_alias=_alias("METRONIX_MEMORY_SEARCH_GRAPH_WEIGHT"))
    memory_session_weight: float = Field(
        0.1, validation_alias=_alias("METRONIX_MEMORY_SEARCH_SESSION_WEIGHT")
    )
    reconciler_threshold: float = Field(
        0.85, validation_alias=_alias("METRONIX_FRESHNESS_RECONCILER_THRESHOLD")
    )
    decision_threshold: float = Field(
        0.7, validation_alias=_alias("METRONIX_FRESHNESS_DECISION_CONFIDENCE_THRESHOLD")
    )

    @field_validator("allowed_hosts", "allowed_origins", "hadron_action_sources", "peers", mode="before")
    @classmethod
    def _split_csv(cls, value: Any) -> Any:
        # A comma-separated environment value is friendlier than JSON for a list of hosts.
        if isinstance(value, str) and not value.lstrip().startswith("["):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("database_url", mode="after")
    @classmethod
    def _postgres_only(cls, value: str | None) -> str | None:
        if not value:
            return None
        if not value.startswith(("postgresql://", "postgres://")):
            raise ValueError(
                "TRIPTYCH_DATABASE_URL must be a postgresql:// URL (unset it to use the embedded SQLite files)"
            )
        return value

    @field_validator("peers", mode="after")
    @classmethod
    def _http_urls(cls, value: list[str]) -> list[str]:
        for url in value:
            if not url.startswith(("http://", "https://")) or len(url.split("://", 1)[1].strip("/")) == 0:
                raise ValueError(f"TRIPTYCH_PEERS must list http:// or https:// base URLs, got {url!r}")
        return [url.rstrip("/") for url in value]

    @field_validator("data_dir", mode="after")
    @classmethod
    def _expand_home(cls, value: Path) -> Path:
        return value.expanduser()

    @property
    def metronix_db(self) -> Path:
        return self.data_dir / "metronix.db"


def load_settings(**overrides: Any) -> Settings:
    """Settings from the environment, with explicit (flag) values taking precedence."""
    clean = {key: value for key, value in overrides.items() if value is not None}
    return Settings(**clean)
