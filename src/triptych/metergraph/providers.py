"""LLM providers reached for replay, through their official client libraries over HTTP.

Two kinds cover the field: any OpenAI-compatible ``/v1/chat/completions`` endpoint (OpenAI, vLLM,
Ollama, LiteLLM, OpenRouter, ...) through the ``openai`` package, and Anthropic's Messages API through
the ``anthropic`` package. Each is configured by environment variables (``MG_REPLAY_*``, see
``ProviderSettings``); a kind with neither a base URL nor an API key set is not configured.

Every call is bounded: the client's own timeout and retry count come from settings, and a wall-clock
deadline around the call covers a server that keeps a connection alive by dribbling bytes. A failure
is a ``ProviderFailure`` with a stable code (``rate_limited``, ``timeout``, ``provider_error``), never
a hang and never an exception from the client library.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import httpx
from pydantic import AliasChoices, Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

Kind = Literal["openai", "anthropic"]
KINDS: tuple[Kind, ...] = ("openai", "anthropic")
DEFAULT_BASE_URLS: dict[Kind, str] = {
    "openai": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com",
}
MAX_OUTPUT_TOKENS = 1024
MAX_TIMEOUT_SECONDS = 30
# A few seconds past the client's own timeout before the wall-clock deadline gives up on a call.
_DEADLINE_GRACE = 2.0


def _alias(*names: str) -> Any:
    return AliasChoices(*names)


class ProviderSettings(BaseSettings):
    """Replay providers, from the environment."""

    model_config = SettingsConfigDict(extra="ignore", populate_by_name=True)

    openai_base_url: str | None = Field(
        None, validation_alias=_alias("MG_REPLAY_OPENAI_BASE_URL", "openai_base_url")
    )
    openai_api_key: str | None = Field(
        None, validation_alias=_alias("MG_REPLAY_OPENAI_API_KEY", "openai_api_key")
    )
    anthropic_base_url: str | None = Field(
        None, validation_alias=_alias("MG_REPLAY_ANTHROPIC_BASE_URL", "anthropic_base_url")
    )
    anthropic_api_key: str | None = Field(
        None, validation_alias=_alias("MG_REPLAY_ANTHROPIC_API_KEY", "anthropic_api_key")
    )
    timeout_seconds: float = Field(
        20,
        gt=0,
        le=MAX_TIMEOUT_SECONDS,
        validation_alias=_alias("MG_REPLAY_TIMEOUT_SECONDS", "timeout_seconds"),
    )
    max_retries: int = Field(0, ge=0, le=2, validation_alias=_alias("MG_REPLAY_MAX_RETRIES", "max_retries"))
    max_output_tokens: int = Field(
        MAX_OUTPUT_TOKENS,
        ge=1,
        le=MAX_OUTPUT_TOKENS,
        validation_alias=_alias("MG_REPLAY_MAX_OUTPUT_TOKENS", "max_output_tokens"),
    )
    # How the output cap is named to the OpenAI-compatible endpoint: OpenAI itself wants
    # max_completion_tokens (its reasoning models refuse max_tokens), most compatible servers max_tokens.
    openai_token_parameter: Literal["auto", "max_tokens", "max_completion_tokens"] = Field(
        "auto", validation_alias=_alias("MG_REPLAY_OPENAI_TOKEN_PARAMETER", "openai_token_parameter")
    )
    # Models a replay may run on (empty: any model the configured providers serve).
    models: Annotated[list[str], NoDecode] = Field(
        default_factory=list, validation_alias=_alias("MG_REPLAY_MODELS", "models")
    )
    # Stored provider names served by the Anthropic Messages API; every other name goes to the
    # OpenAI-compatible endpoint.
    anthropic_providers: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["anthropic"],
        validation_alias=_alias("MG_REPLAY_ANTHROPIC_PROVIDERS", "anthropic_providers"),
    )

    @field_validator("models", "anthropic_providers", mode="before")
    @classmethod
    def _split_csv(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("openai_base_url", "anthropic_base_url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        url = httpx.URL(value.strip())
        if url.scheme not in ("http", "https") or not url.host:
            raise ValueError("a provider base URL must be an absolute http(s) URL")
        return str(url).rstrip("/")


def load_provider_settings(**overrides: Any) -> ProviderSettings:
    return ProviderSettings(**{k: v for k, v in overrides.items() if v is not None})


@dataclass(frozen=True, slots=True)
class Message:
    role: str  # user | assistant
    content: str


@dataclass(frozen=True, slots=True)
class CompletionRequest:
    """One non-streaming completion: the text of a retained call, possibly overridden."""

    model: str
    system: str | None
    messages: tuple[Message, ...]
    max_output_tokens: int
    temperature: float | None = None
    top_p: float | None = None


@dataclass(frozen=True, slots=True)
class Completion:
    text: str
    input_tokens: int
    output_tokens: int
    finish_reason: str | None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)


class ProviderFailure(Exception):
    """A provider call that did not produce a completion."""

    def __init__(self, status: str, code: str, message: str, http_status: int | None = None) -> None:
        super().__init__(message)
        self.status = status  # provider_error | timeout
        self.code = code  # rate_limited | timeout | provider_error | provider_unreachable
        self.message = message
        self.http_status = http_status


Caller = Callable[[Any, CompletionRequest], Completion]


class Providers:
    """The configured provider kinds and one bounded call to either."""

    def __init__(self, settings: ProviderSettings | None = None) -> None:
        self.settings = settings or load_provider_settings()
        # Calls run on these threads so a wall-clock deadline bounds them whatever the socket does.
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="mg-replay")

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    # -- configuration -----------------------------------------------------------------------

    def configured(self, kind: Kind) -> bool:
        s = self.settings
        if kind == "openai":
            return bool(s.openai_base_url or s.openai_api_key)
        return bool(s.anthropic_base_url or s.anthropic_api_key)

    def configured_kinds(self) -> list[Kind]:
        return [k for k in KINDS if self.configured(k)]

    def kind_for(self, provider: str | None) -> Kind:
        """The API a stored provider name is replayed on."""
        wanted = {p.lower() for p in self.settings.anthropic_providers}
        return "anthropic" if (provider or "").lower() in wanted else "openai"

    def model_allowed(self, model: str) -> bool:
        return not self.settings.models or model in self.settings.models

    def base_url(self, kind: Kind) -> str:
        own = self.settings.openai_base_url if kind == "openai" else self.settings.anthropic_base_url
        return own or DEFAULT_BASE_URLS[kind]

    # -- calls --------------------------------------------------------------------------------

    def complete(self, kind: Kind, request: CompletionRequest, timeout: float | None = None) -> Completion:
        """One completion on ``kind``, bounded by ``timeout`` seconds (settings' default when None)."""
        limit = min(float(timeout or self.settings.timeout_seconds), MAX_TIMEOUT_SECONDS)
        call: Caller = self._openai if kind == "openai" else self._anthropic
        # One client per call: closing it at the deadline ends that call's connection and frees its
        # thread, without touching other calls.
        client = self._client(kind, limit)
        future = self._pool.submit(call, client, request)
        # The caller's timeout bounds the whole replay, retries included (so a bridge or proxy waiting
        # on the tool call is never outlasted).
        deadline = limit + _DEADLINE_GRACE
        try:
            return future.result(timeout=deadline)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise ProviderFailure(
                "timeout", "timeout", f"the provider did not answer within {limit:g} s"
            ) from None
        finally:
            client.close()

    def _token_parameter(self) -> str:
        chosen = self.settings.openai_token_parameter
        if chosen != "auto":
            return chosen
        host = httpx.URL(self.base_url("openai")).host
        return "max_completion_tokens" if host == "api.openai.com" else "max_tokens"

    def _client(self, kind: Kind, timeout: float) -> Any:
        s = self.settings
        library = _library(kind)
        # Each library takes the timeout in seconds and builds its own Timeout from it.
        if kind == "openai":
            return library.OpenAI(
                api_key=s.openai_api_key or "not-needed",
                base_url=self.base_url("openai"),
                timeout=timeout,
                max_retries=s.max_retries,
            )
        return library.Anthropic(
            api_key=s.anthropic_api_key or "not-needed",
            base_url=self.base_url("anthropic"),
            timeout=timeout,
            max_retries=s.max_retries,
        )

    def _openai(self, client: Any, request: CompletionRequest) -> Completion:
        messages: list[dict[str, Any]] = []
        if request.system is not None:
            messages.append({"role": "system", "content": request.system})
        messages += [{"role": m.role, "content": m.content} for m in request.messages]
        extra: dict[str, Any] = {}
        if request.temperature is not None:
            extra["temperature"] = request.temperature
        if request.top_p is not None:
            extra["top_p"] = request.top_p
        extra[self._token_parameter()] = request.max_output_tokens
        try:
            response = client.chat.completions.create(model=request.model, messages=messages, **extra)
        except Exception as exc:  # noqa: BLE001 - every client failure becomes a ProviderFailure
            raise _failure(exc, _library("openai")) from None
        choice = response.choices[0] if response.choices else None
        message = choice.message if choice is not None else None
        tool_calls = [
            {"name": t.function.name, "arguments": t.function.arguments}
            for t in (message.tool_calls or [] if message is not None else [])
            if getattr(t, "function", None) is not None
        ]
        usage = response.usage
        return Completion(
            text=(message.content or "") if message is not None else "",
            input_tokens=int(usage.prompt_tokens) if usage else 0,
            output_tokens=int(usage.completion_tokens) if usage else 0,
            finish_reason=choice.finish_reason if choice is not None else None,
            tool_calls=tool_calls,
        )

    def _anthropic(self, client: Any, request: CompletionRequest) -> Completion:
        extra: dict[str, Any] = {}
        if request.system is not None:
            extra["system"] = request.system
        # The 2.x client dropped the sampling arguments; the Messages API still takes them.
        sampling = {
            k: v for k, v in (("temperature", request.temperature), ("top_p", request.top_p)) if v is not None
        }
        if sampling:
            extra["extra_body"] = sampling
        try:
            response = client.messages.create(
                model=request.model,
                max_tokens=request.max_output_tokens,
                messages=[{"role": m.role, "content": m.content} for m in request.messages],
                **extra,
            )
        except Exception as exc:  # noqa: BLE001 - every client failure becomes a ProviderFailure
            raise _failure(exc, _library("anthropic")) from None
        texts = [b.text for b in response.content if getattr(b, "type", None) == "text"]
        tool_calls = [
            {"name": b.name, "arguments": b.input}
            for b in response.content
            if getattr(b, "type", None) == "tool_use"
        ]
        return Completion(
            text="".join(texts),
            input_tokens=int(response.usage.input_tokens),
            output_tokens=int(response.usage.output_tokens),
            finish_reason=response.stop_reason,
            tool_calls=tool_calls,
        )


def _library(kind: Kind) -> Any:
    """The client library of ``kind``, imported on first use: the two take seconds to import, which
    every CLI command and server start would otherwise pay whether or not replay is configured."""
    if kind == "openai":
        import openai

        return openai
    import anthropic

    return anthropic


def _failure(exc: Exception, library: Any) -> ProviderFailure:
    """A client library's exception as a ProviderFailure (both libraries share the class names)."""
    if isinstance(exc, library.APITimeoutError):
        return ProviderFailure("timeout", "timeout", "the provider did not answer in time")
    if isinstance(exc, library.RateLimitError):
        retry = exc.response.headers.get("retry-after")
        hint = f" (retry after {retry} s)" if retry else ""
        return ProviderFailure(
            "provider_error", "rate_limited", f"the provider is rate limiting requests{hint}", 429
        )
    if isinstance(exc, library.APIStatusError):
        return ProviderFailure(
            "provider_error",
            "provider_error",
            f"the provider answered HTTP {exc.status_code}: {_short(exc.message)}",
            exc.status_code,
        )
    if isinstance(exc, library.APIConnectionError):
        return ProviderFailure(
            "provider_error", "provider_unreachable", "could not reach the provider: check its base URL"
        )
    return ProviderFailure(
        "provider_error", "provider_error", f"the provider answer was not usable: {_short(str(exc))}"
    )


def _short(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def elapsed_ms(start: float) -> float:
    return round((time.perf_counter() - start) * 1000, 3)
