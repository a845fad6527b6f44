"""The analysis runner's ``Replayer`` over the replay service: each sampled call goes through the same
provider path as ``metergraph_replay_trace`` (real client libraries, the configured endpoints)."""

from __future__ import annotations

from triptych.core.errors import TriptychError
from triptych.metergraph.analysis_sources import ReplayResult, RetainedCall
from triptych.metergraph.replay import ReplayService

REPLAY_TIMEOUT_SECONDS = 30.0
_PREFIXED = ("openai", "anthropic")  # the API prefixes the replay service understands


class ProviderReplayer:
    def __init__(self, replay: ReplayService, timeout: float = REPLAY_TIMEOUT_SECONDS) -> None:
        self.service = replay
        self.timeout = timeout

    @property
    def available(self) -> bool:
        return self.service.available

    def replay(self, workspace: str, call: RetainedCall, provider: str | None, model: str) -> ReplayResult:
        stored = {
            "request_text": call.request_text,
            "provider": call.provider,
            "model": call.model,
            "output_tokens": call.output_tokens,
        }
        # A candidate of another API than the reference's is named with its prefix (``anthropic:...``).
        target = (
            model if provider in (None, call.provider) or provider not in _PREFIXED else f"{provider}:{model}"
        )
        try:
            outcome = self.service.replay_call(workspace, stored, model=target, timeout=self.timeout)
        except TriptychError as exc:  # not replayable on this server: a failed case, with the reason
            return ReplayResult(None, 0, 0, 0.0, error_code=exc.code)
        if outcome.status != "succeeded" or outcome.text is None:
            return ReplayResult(
                None, 0, 0, outcome.latency_ms, error_code=outcome.error_code or outcome.status
            )
        return ReplayResult(
            outcome.text, outcome.input_tokens or 0, outcome.output_tokens or 0, outcome.latency_ms, None
        )
