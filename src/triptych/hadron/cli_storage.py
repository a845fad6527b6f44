"""What ``triptych hadron source ...`` (Git sources of memories) and ``triptych hadron key ...`` (the server
key of encrypted memories) do: the operator's side of issue 18. Each command prints what it did; their
arguments are declared in ``hadron/cli.py`` (docs/decisions/0310)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from triptych.core.config import load_settings
from triptych.core.errors import TriptychError
from triptych.hadron import gitrepo
from triptych.hadron.sealing import ENV_KEY_FILE, KeyConfigError, ServerKey, load_key, rotate, write_key_file

Action = Callable[[Path, argparse.Namespace], str]


def _run(action: Action) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        settings = load_settings(data_dir=getattr(args, "data_dir", None))
        try:
            print(action(settings.data_dir / "hadron.db", args))
        except TriptychError as exc:
            print(f"triptych hadron: {exc.code}: {exc.message}", file=sys.stderr)
            return 2
        except (KeyConfigError, gitrepo.GitError, OSError) as exc:
            print(f"triptych hadron: {exc}", file=sys.stderr)
            return 2
        return 0

    return run


def _open(path: Path) -> Any:
    from triptych.hadron.surface import Hadron

    # Server mode: the stores are in TRIPTYCH_DATABASE_URL's PostgreSQL database, not in ``path``.
    return Hadron.open(path, key=load_key(), database_url=load_settings().database_url)


def _source_attach(path: Path, a: argparse.Namespace) -> str:
    head = gitrepo.remote_head(a.url, a.branch)  # refuse a URL git cannot read before recording it
    hadron = _open(path)
    try:
        memory = hadron.admin().memory(a.memory)
        hadron.gitsync.store.attach(memory.id, gitrepo.check_url(a.url), a.branch)
    finally:
        hadron.close()
    branch = a.branch or "the default branch"
    return (
        f"attached {a.url} ({branch}, head {head[:12]}) to {memory.urn}; "
        f"sync it with hadron_sync_graph or `triptych hadron source sync {memory.urn}`"
    )


def _source_detach(path: Path, a: argparse.Namespace) -> str:
    hadron = _open(path)
    try:
        memory = hadron.admin().memory(a.memory)
        gone = hadron.gitsync.store.detach(memory.id)
    finally:
        hadron.close()
    return (
        f"detached the Git source of {memory.urn} (its nodes stay)"
        if gone
        else f"{memory.urn} had no Git source"
    )


def _source_list(path: Path, a: argparse.Namespace) -> str:
    hadron = _open(path)
    try:
        lines = []
        for source in hadron.gitsync.store.sources():
            memory = hadron.tenancy.memory(source.memory_id)
            state = f"synced {source.commit[:12]} at {source.synced_at}" if source.commit else "never synced"
            error = f"; last error: {source.last_error}" if source.last_error else ""
            lines.append(
                f"{memory.urn if memory else source.memory_id} <- {source.url} ({source.branch or 'default branch'}): {state}{error}"
            )
    finally:
        hadron.close()
    return "\n".join(lines) or "no memory has a Git source"


def _source_sync(path: Path, a: argparse.Namespace) -> str:
    hadron = _open(path)
    try:
        memory = hadron.admin().memory(a.memory)
        report = hadron.gitsync.sync_memory(memory, "cli:source-sync")
    finally:
        hadron.close()
    counts = report.as_dict()["counts"]
    return f"synced {memory.urn} at {report.commit[:12]}: " + ", ".join(f"{k} {v}" for k, v in counts.items())


def _key_new(path: Path, a: argparse.Namespace) -> str:
    key = ServerKey.generate()
    write_key_file(Path(a.file), key)
    return f"wrote a new Hadron key (id {key.id}) to {a.file} (mode 600); serve with {ENV_KEY_FILE}={a.file}"


def _key_rotate(path: Path, a: argparse.Namespace) -> str:
    from triptych.hadron.engines import open_stores

    old = load_key()
    if old is None:
        raise KeyConfigError(f"the key in use is not configured: set {ENV_KEY_FILE} to it for the rotation")
    new = ServerKey.parse(Path(a.new_key_file).read_text(), f"the key file {a.new_key_file}")
    stores = open_stores(path, load_settings().database_url, None, None)
    try:
        done = rotate(stores.db, old, new)
    finally:
        stores.close()
    return (
        f"re-encrypted {done.nodes} node(s), {done.revisions} revision(s) and {done.messages} Channel message(s) "
        f"of {done.memories} encrypted "
        f"memor{'y' if done.memories == 1 else 'ies'} under key {done.new} (key {done.old} retired); "
        f"start the server with {ENV_KEY_FILE}={a.new_key_file}"
    )


# The commands ``hadron/cli.py`` names: (parsed arguments) -> exit status.
source_attach = _run(_source_attach)
source_detach = _run(_source_detach)
source_list = _run(_source_list)
source_sync = _run(_source_sync)
key_new = _run(_key_new)
key_rotate = _run(_key_rotate)
