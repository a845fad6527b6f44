"""Replay: re-send one retained call to a provider and compare the new answer with the original.

``metergraph_replay_trace`` (Replay role) answers the contract's ``trace-debug/replay`` document:
the original call's input, output, tokens, cost and latency next to the replay's, with the overrides
applied. Nothing is persisted. A provider failure is a replay outcome (``status`` provider_error or
timeout with an ``error`` object), a call that cannot be replayed is the ``replay_not_eligible``
refusal.

``ReplayService.replay_call`` is the same replay for in-process callers (analysis runs): one stored
call, optionally on a candidate model, as a ``ReplayOutcome``.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from triptych.metergraph.call_store import CallStore
from triptych.metergraph.contract import SCOPE_REPLAY, TRACE_DEBUG_VERSION
from triptych.metergraph.errors import ForbiddenError, NotFoundError, ReplayNotEligible, UnsupportedCapability
from triptych.metergraph.keys import AgentPrincipal
from triptych.metergraph.metadata_store import MetadataStore
from triptych.metergraph.pricing import Pricer
from triptych.metergraph.providers import (
    MAX_OUTPUT_TOKENS,
    CompletionRequest,
    Kind,
    Message,
    ProviderFailure,
    Providers,
    elapsed_ms,
)

log = logging.getLogger(__name__)

MAX_TEXT = 16 * 1024  # characters of one text field in a replay document
MAX_MESSAGES = 50  # messages shown per input (the request sent holds them all)
MAX_SPANS_SCANNED = 200
_SYSTEM_ROLES = {"system", "developer"}
_KIND_PREFIXES: dict[str, Kind] = {"openai:": "openai", "anthropic:": "anthropic"}


@dataclass(frozen=True, slots=True)
class ParsedRequest:
    system: str | None
    messages: tuple[Message, ...]
    temperature: float | None
    top_p: float | None
    max_output_tokens: int | None


@dataclass(frozen=True, slots=True)
class ReplayOutcome:
    """One replay of one stored call (never persisted)."""

    status: str  # succeeded | provider_error | timeout
    provider: str
    model: str
    request: CompletionRequest
    text: str | None
    input_tokens: int | None
    output_tokens: int | None
    cost_usd: float | None
    latency_ms: float
    finish_reason: str | None = None
    tool_calls: tuple[dict[str, Any], ...] = ()
    error_code: str | None = None
    error_message: str | None = None


def _text_of(content: Any) -> str | None:
    """The text of a message's content: a string, or the text parts of a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "\n".join(parts) if parts else None
    return None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def parse_request(text: str) -> ParsedRequest:
    """The messages of a retained request: an OpenAI- or Anthropic-style request body, a list of
    messages, a ``prompt``/``input`` object, or plain text (one user message)."""
    try:
        doc: Any = json.loads(text)
    except ValueError:
        doc = text
    body: Mapping[str, Any] = doc if isinstance(doc, dict) else {}
    if isinstance(doc, list):
        raw_messages: list[Any] = doc
    elif isinstance(body.get("messages"), list):
        raw_messages = body["messages"]
    elif isinstance(body.get("input"), list):
        raw_messages = body["input"]
    else:
        single = doc if isinstance(doc, str) else _text_of(body.get("prompt") or body.get("input"))
        raw_messages = [{"role": "user", "content": single}] if single else []
    system_parts = [t for t in [_text_of(body.get("system")), _text_of(body.get("instructions"))] if t]
    messages: list[Message] = []
    for m in raw_messages:
        if not isinstance(m, dict):
            continue
        content = _text_of(m.get("content"))
        if not content:
            continue
        role = m.get("role")
        if role in _SYSTEM_ROLES:
            system_parts.append(content)
        elif role == "assistant":
            messages.append(Message("assistant", content))
        else:  # user, tool results and unknown roles reach the model as user text
            messages.append(Message("user", content))
    max_tokens = next(
        (body[k] for k in ("max_tokens", "max_completion_tokens", "max_output_tokens")
         if isinstance(body.get(k), int) and not isinstance(body.get(k), bool)),
        None,
    )  # fmt: skip
    return ParsedRequest(
        "\n\n".join(system_parts) if system_parts else None,
        tuple(messages),
        _number(body.get("temperature")),
        _number(body.get("top_p")),
        max_tokens,
    )


def _bounded(text: str | None) -> dict[str, Any]:
    if text is None:
        return {"state": "not_retained", "text": None}
    if len(text) > MAX_TEXT:
        return {"state": "captured", "text": text[:MAX_TEXT], "response_limited": True}
    return {"state": "captured", "text": text}


def _input_part(system: str | None, messages: tuple[Message, ...]) -> dict[str, Any]:
    last_user = next((m.content for m in reversed(messages) if m.role == "user"), None)
    shown = messages[-MAX_MESSAGES:]
    part: dict[str, Any] = {
        "state": "captured",
        "text": _bounded(last_user)["text"],
        "system": _bounded(system)["text"],
        "messages": [{"role": m.role, "content": _bounded(m.content)["text"]} for m in shown],
    }
    if len(shown) < len(messages):
        part["messages_limited"] = True
    return part


class ReplayService:
    def __init__(
        self,
        store: CallStore,
        metadata: MetadataStore,
        pricer: Pricer,
        providers: Providers,
        clock: Callable[[], datetime],
    ) -> None:
        self.store = store
        self.metadata = metadata
        self.pricer = pricer
        self.providers = providers
        self.clock = clock

    @property
    def available(self) -> bool:
        """Replay works once at least one provider is configured."""
        return bool(self.providers.configured_kinds())

    # -- metergraph_replay_trace ------------------------------------------------------------

    def replay(
        self,
        principal: AgentPrincipal,
        trace_id: str,
        overrides: Mapping[str, Any] | None = None,
        timeout_seconds: int | None = None,
    ) -> dict[str, Any]:
        if not principal.has(SCOPE_REPLAY):
            raise ForbiddenError("metergraph_replay_trace needs the Replay role (agent:replay)")
        if not self.available:
            raise UnsupportedCapability(
                "replay is not configured on this server: set MG_REPLAY_OPENAI_BASE_URL or "
                "MG_REPLAY_ANTHROPIC_API_KEY (see docs/metergraph.md)"
            )
        overrides = dict(overrides or {})
        span = self._replayable_span(principal, trace_id)
        outcome = self.replay_call(
            principal.workspace,
            span,
            model=overrides.get("model"),
            prompt=overrides.get("prompt"),
            system=overrides.get("system"),
            temperature=overrides.get("temperature"),
            top_p=overrides.get("top_p"),
            max_output_tokens=overrides.get("max_output_tokens"),
            timeout=timeout_seconds,
        )
        return self._document(trace_id, span, outcome, overrides)

    def _replayable_span(self, principal: AgentPrincipal, trace_id: str) -> dict[str, Any]:
        spans = self.store.trace_spans(principal.workspace, trace_id, MAX_SPANS_SCANNED)
        if principal.environments is not None and any(
            s["environment"] not in principal.environments for s in spans
        ):
            spans = []  # outside the key's environments: indistinguishable from an unknown trace
        if not spans:
            raise NotFoundError("no trace with that id in this workspace")
        workspace = self.metadata.workspace(principal.workspace) or {}
        if not workspace.get("retain_content"):
            raise ReplayNotEligible(
                "content retention is off for this workspace, so no call can be replayed: turn it on with "
                "`triptych metergraph retain-content on` and replay calls ingested afterwards"
            )
        for span in spans:
            if span["request_text"] is not None and parse_request(span["request_text"]).messages:
                return span
        raise ReplayNotEligible(
            "no call of this trace has retained request text to replay (content was not captured or "
            "the SDK did not send it)"
        )

    def replay_call(
        self,
        workspace: str,
        call: Mapping[str, Any],
        *,
        model: str | None = None,
        prompt: str | None = None,
        system: str | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        max_output_tokens: int | None = None,
        timeout: float | None = None,
    ) -> ReplayOutcome:
        """Replay one stored call (a row of ``trace_spans``: call columns plus ``request_text``),
        optionally on ``model``. Refuses (``replay_not_eligible``) a call without retained request
        text, or one on a provider or model this server is not configured for."""
        if call.get("workspace") not in (None, workspace):
            raise NotFoundError("no such call in this workspace")  # a row read for another workspace
        if call.get("request_text") is None:
            raise ReplayNotEligible("the call has no retained request text")
        parsed = parse_request(call["request_text"])
        if not parsed.messages:
            raise ReplayNotEligible("the retained request holds no message text to replay")
        kind, provider, target = self._target(call, model)
        messages = parsed.messages
        if prompt is not None:
            # The override replaces the last user message (or becomes one).
            last = max((i for i, m in enumerate(messages) if m.role == "user"), default=None)
            messages = (
                (*messages[:last], Message("user", prompt), *messages[last + 1 :])
                if last is not None
                else (*messages, Message("user", prompt))
            )
        cap = self.providers.settings.max_output_tokens
        if max_output_tokens is None:
            original = call.get("output_tokens") or parsed.max_output_tokens
            max_output_tokens = min(cap, max(64, 2 * int(original))) if original else cap
        request = CompletionRequest(
            model=target,
            system=system if system is not None else parsed.system,
            messages=messages,
            max_output_tokens=min(max_output_tokens, cap, MAX_OUTPUT_TOKENS),
            temperature=temperature if temperature is not None else parsed.temperature,
            top_p=top_p if top_p is not None else parsed.top_p,
        )
        start = time.perf_counter()
        try:
            done = self.providers.complete(kind, request, timeout)
        except ProviderFailure as failure:
            # Operators see failing providers in the log; no content is written there.
            log.warning("replay on %s %s (%s): %s, %s", kind, target, provider, failure.code, failure.message)
            return ReplayOutcome(
                failure.status, provider, target, request, None, None, None, None,
                elapsed_ms(start),
                error_code=failure.code, error_message=failure.message,
            )  # fmt: skip
        latency = elapsed_ms(start)
        price = self.pricer.price(provider, target, self.clock(), done.input_tokens, done.output_tokens)
        return ReplayOutcome(
            "succeeded", provider, target, request, done.text, done.input_tokens, done.output_tokens,
            price.cost_usd, latency, done.finish_reason, tuple(done.tool_calls),
        )  # fmt: skip

    def _target(self, call: Mapping[str, Any], model: str | None) -> tuple[Kind, str, str]:
        """(API kind, provider name for pricing, model) of a replay of ``call`` on ``model``."""
        original_provider = call.get("provider") or None
        original_kind = self.providers.kind_for(original_provider)
        if model is None:
            if not call.get("model"):
                raise ReplayNotEligible("the call has no model to replay on: name one in overrides.model")
            kind, provider, target = original_kind, original_provider or original_kind, call["model"]
        else:
            prefix = next((p for p in _KIND_PREFIXES if model.startswith(p)), None)
            if prefix is not None:
                kind, target = _KIND_PREFIXES[prefix], model[len(prefix) :]
            else:
                # A model the price catalogue knows goes to its vendor's API (Anthropic's, or the
                # OpenAI-compatible one for every other vendor); an unknown one to the original's API.
                found = self.pricer.resolve(None, model, self.clock()).provider_id
                kind = original_kind if found is None else ("anthropic" if found == "anthropic" else "openai")
                target = model
            # Priced as the original provider when the API is the same one, else as the API's vendor.
            same = kind == original_kind and original_provider is not None
            provider = original_provider if same else kind
            if not target:
                raise ReplayNotEligible("overrides.model names no model")
            if not self.providers.model_allowed(target):
                raise ReplayNotEligible(
                    "that model is not in this server's replay allowlist (MG_REPLAY_MODELS)"
                )
        if not self.providers.configured(kind):
            variable = "MG_REPLAY_OPENAI_BASE_URL" if kind == "openai" else "MG_REPLAY_ANTHROPIC_API_KEY"
            raise ReplayNotEligible(
                f"no {kind} provider is configured for replay on this server (set {variable})"
            )
        return kind, str(provider), target

    # -- the document -----------------------------------------------------------------------

    def _document(
        self, trace_id: str, span: Mapping[str, Any], outcome: ReplayOutcome, overrides: Mapping[str, Any]
    ) -> dict[str, Any]:
        parsed = parse_request(span["request_text"])
        original_tools = json.loads(span["content_tool_calls"]) if span.get("content_tool_calls") else []
        original = {
            "provider": span["provider"],
            "model": span["model"],
            "input": _input_part(parsed.system, parsed.messages),
            "output": _bounded(span["response_text"]),
            "tool_calls": original_tools if isinstance(original_tools, list) else [],
            "error_type": span["error_type"],
            "latency_ms": span["latency_ms"],
            "cost_usd": span["cost_usd"],
            "usage": {
                "input_tokens": int(span["input_tokens"] or 0),
                "output_tokens": int(span["output_tokens"] or 0),
            },
        }
        replay: dict[str, Any] = {
            "provider": outcome.provider,
            "model": outcome.model,
            "input": _input_part(outcome.request.system, outcome.request.messages),
            "output": _bounded(outcome.text)
            if outcome.text is not None
            else {"state": "not_available", "text": None},
            "tool_calls": list(outcome.tool_calls),
            "error_type": outcome.error_code,
            "latency_ms": outcome.latency_ms,
            "cost_usd": None if outcome.cost_usd is None else round(outcome.cost_usd, 10),
            "usage": {
                "input_tokens": int(outcome.input_tokens or 0),
                "output_tokens": int(outcome.output_tokens or 0),
            },
            "finish_reason": outcome.finish_reason,
            "max_output_tokens": outcome.request.max_output_tokens,
        }
        body: dict[str, Any] = {
            "schema_version": TRACE_DEBUG_VERSION,
            "status": outcome.status,
            "provenance": {
                "source_trace_id": trace_id,
                "source_span_id": span["span_id"] or f"call:{span['id']}",
                "replayed_at": self.clock().isoformat(),
                "overrides": {k: v for k, v in overrides.items() if v is not None},
                "writes_production": False,
            },
            "comparison": {"original": original, "replay": replay},
            "content_included": True,
            "persisted": False,
        }
        if outcome.status == "succeeded":
            body["delta"] = _delta(original, replay)
        else:
            body["error"] = {"code": outcome.error_code, "message": outcome.error_message}
        return body


def _delta(original: Mapping[str, Any], replay: Mapping[str, Any]) -> dict[str, Any]:
    def diff(a: Any, b: Any) -> float | None:
        return None if a is None or b is None else round(float(b) - float(a), 10)

    return {
        "cost_usd": diff(original["cost_usd"], replay["cost_usd"]),
        "latency_ms": diff(original["latency_ms"], replay["latency_ms"]),
        "input_tokens": replay["usage"]["input_tokens"] - original["usage"]["input_tokens"],
        "output_tokens": replay["usage"]["output_tokens"] - original["usage"]["output_tokens"],
    }
