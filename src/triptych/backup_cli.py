"""``triptych backup`` and ``triptych restore``: the data directory's layout as the surfaces keep it, the
commands' words, and what server mode leaves to the engines' own tools. The copying is in core/backup.py."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from triptych import __version__
from triptych.core.datadir import HELP as DATA_DIR_HELP

if TYPE_CHECKING:  # the settings models load when a command runs, not when the parser is built
    from triptych.core.config import Settings

# metergraph/service.py's COLUMNS_DIR, spelled here: importing that module loads all of Metergraph (1.4 s of
# every backup); a test keeps the two equal.
COLUMNS_DIR = "metergraph.columns"
# Never in a backup: said on every run, since a restored server needs it for encrypted memories.
KEY_NOTE = (
    "never copied (TRIPTYCH_HADRON_KEY, or the file TRIPTYCH_HADRON_KEY_FILE names): keep it apart from the"
    " backup; a server started on the restore needs the same key for encrypted memories"
)


def layout(settings: Settings) -> Any:
    """Where the surfaces keep what, relative to the data directory (``core.backup.Layout``)."""
    from triptych.core.backup import Layout
    from triptych.metergraph.pages.session import SECRET_FILE
    from triptych.metronix.store import vectors_dir

    skipped = {
        # A fetch cache and work trees of the sources' repositories (hadron/services/gitsync.py): the
        # repository is the record, and a copy taken during a fetch may be torn.
        "hadron-git": "Git-backed memories' local caches: the next hadron_sync_graph fetches them again",
        SECRET_FILE: "a secret (the app pages' session key): a restored server makes a new one, and page"
        " sign-ins start again",
    }
    key_file = os.environ.get("TRIPTYCH_HADRON_KEY_FILE")
    if key_file:
        inside = _inside(Path(key_file), settings.data_dir)
        if inside is not None:
            skipped[inside] = "the Hadron encryption key: never in a backup"
    vectors = _inside(vectors_dir(settings.metronix_db), settings.data_dir)
    if vectors is not None:
        skipped[vectors] = (
            "the knowledge base's saved vector and keyword indexes: a cache of metronix.db, rebuilt from it"
        )
    # The projection's state file is replaced atomically after the appends it counts (metergraph/columns.py).
    return Layout(append_only={COLUMNS_DIR: "state.json"}, skipped=skipped)


def _inside(path: Path, folder: Path) -> str | None:
    try:
        return path.expanduser().resolve().relative_to(folder.resolve()).as_posix()
    except ValueError:
        return None


def elsewhere(settings: Settings) -> list[dict[str, str]]:
    """What the server keeps outside the data directory, and the tool that backs it up."""
    from triptych.core.pg import redacted
    from triptych.metergraph.settings import load_metergraph_settings

    found: list[dict[str, str]] = []
    if settings.database_url:
        found.append({
            "path": redacted(settings.database_url),
            "why": "Metronix's and Hadron's data are in PostgreSQL (server mode): back them up with the engine's"
            " own tool, pg_dump (pg_dump --format=custom --file=triptych.dump URL; pg_restore to bring it back)",
        })  # fmt: skip
    clickhouse = load_metergraph_settings().clickhouse_url
    if clickhouse:
        found.append({
            "path": redacted(clickhouse),
            "why": "Metergraph's calls and rollups are in ClickHouse: back them up with ClickHouse's BACKUP"
            " (BACKUP DATABASE <db> TO Disk('backups', 'metergraph.zip'); RESTORE brings it back); keys,"
            " sessions, routes and workloads stay in metergraph.db and are copied here",
        })  # fmt: skip
    sources = Path(settings.mcp_sources).expanduser() if settings.mcp_sources else None
    if sources is not None and _inside(sources, settings.data_dir) is None:
        found.append({
            "path": str(sources),
            "why": "the metronix_sync source registry is outside the data directory (TRIPTYCH_MCP_SOURCES):"
            " back it up with the rest of the configuration",
        })  # fmt: skip
    found.append({"path": "the Hadron encryption key", "why": KEY_NOTE})
    return found


def _bar(total: int, desc: str) -> Any:
    from tqdm import tqdm

    return tqdm(
        total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=desc, file=sys.stderr, leave=False
    )


def _mb(size: int) -> str:
    return f"{size / 1_000_000:.1f} MB"


def _guarded(bar: Any, verb: str, noun: str, where: Path, job: Callable[[], Any]) -> Any | None:
    """``job()`` with the bar closed after it; a refusal or a disk error said in one line on stderr (None)."""
    from triptych.core.backup import BackupRefused

    try:
        return job()
    except BackupRefused as exc:
        problem = f"cannot {verb}: {exc}"
    except OSError as exc:
        problem = (
            f"the {noun} failed ({exc.strerror or exc}{f': {exc.filename}' if exc.filename else ''});"
            f" nothing was left in {where}: check the disk and retry"
        )
    finally:
        bar.close()
    print(f"triptych: {problem}", file=sys.stderr)
    return None


def cmd_backup(args: argparse.Namespace) -> int:
    from triptych.core.backup import backup, plan
    from triptych.core.config import load_settings

    settings = load_settings(data_dir=args.data_dir)
    rules = layout(settings)
    listed = plan(settings.data_dir, rules)[0] if settings.data_dir.is_dir() else []
    bar = _bar(sum(_size(settings.data_dir / e.path) for e in listed), "backing up")
    manifest = _guarded(
        bar, "back up", "backup", args.dest,
        lambda: backup(settings.data_dir, args.dest, rules, __version__, bar.update, elsewhere(settings)),
    )  # fmt: skip
    if manifest is None:
        return 1
    print(
        f"backed up {manifest.data_dir} to {Path(args.dest).resolve()} in {manifest.seconds:.1f} s:"
        f" {len(manifest.files)} files, {_mb(manifest.size)} (manifest.json lists each with its SHA-256)"
    )
    folders: dict[str, list[int]] = {}
    for entry in manifest.files:
        folder, _, rest = entry.path.partition("/")
        if rest and folder != ".metronix":  # a folder of many files (the projection): one line
            folders.setdefault(folder, []).append(entry.size)
            continue
        schema = ", ".join(f"{name} {v}" for name, v in (entry.schema or {}).items())
        how = "SQLite online backup" if entry.kind == "sqlite" else "copied"
        print(f"  {entry.path}: {_mb(entry.size)}, {how}{f'; schema {schema}' if schema else ''}")
    for folder, sizes in folders.items():
        print(f"  {folder}/: {len(sizes)} files, {_mb(sum(sizes))}, copied (its state file first)")
    print("not copied:")
    for item in manifest.not_copied:
        print(f"  {item['path']}: {item['why']}")
    print(f"restore with: triptych restore {Path(args.dest).resolve()} --data-dir NEW_FOLDER")
    return 0


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def cmd_restore(args: argparse.Namespace) -> int:
    from triptych.core.backup import BackupRefused, read_manifest, restore
    from triptych.core.config import load_settings

    settings = load_settings(data_dir=args.data_dir)
    try:
        total = read_manifest(args.src).size
    except BackupRefused as exc:
        print(f"triptych: cannot restore: {exc}", file=sys.stderr)
        return 1
    bar = _bar(total, "restoring")
    manifest = _guarded(
        bar, "restore", "restore", settings.data_dir, lambda: restore(args.src, settings.data_dir, bar.update)
    )
    if manifest is None:
        return 1
    target = settings.data_dir.resolve()
    print(
        f"restored {len(manifest.files)} files ({_mb(manifest.size)}, every SHA-256 checked) from the backup"
        f" of {manifest.data_dir} made {manifest.created_at} by Triptych {manifest.triptych_version} into"
        f" {target}"
    )
    print(
        f"start the server with: triptych serve --data-dir {target} (and the same Hadron key, if one was set)"
    )
    return 0


def register(sub: Any) -> None:
    """The ``backup`` and ``restore`` subcommands."""
    backup = sub.add_parser(
        "backup",
        help="copy the data directory consistently while the server runs (SQLite online backup, manifest"
        " with SHA-256 checksums; never the Hadron key)",
    )
    backup.add_argument("dest", type=Path, help="a new or empty folder for the backup")
    backup.add_argument("--data-dir", type=Path, help=DATA_DIR_HELP)
    backup.set_defaults(func=cmd_backup)
    restore = sub.add_parser(
        "restore", help="check a backup's manifest and checksums and lay it out as a new data directory"
    )
    restore.add_argument("src", type=Path, help="the folder `triptych backup` wrote")
    restore.add_argument(
        "--data-dir", type=Path, help="the new data directory (must be new or empty; " + DATA_DIR_HELP + ")"
    )
    restore.set_defaults(func=cmd_restore)
