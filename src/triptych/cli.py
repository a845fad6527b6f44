"""The ``triptych`` command: serve, mcp, token, reindex, kb import."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING, Any

from triptych import __version__
from triptych.core.commands import uncollected_startup
from triptych.core.datadir import HELP as DATA_DIR_HELP
from triptych.core.datadir import describe, is_fresh
from triptych.metergraph.bridge_help import BRIDGE_ENVIRONMENT

if TYPE_CHECKING:
    from triptych.core.config import Settings
    from triptych.core.logs import LogFormat

SURFACES = ("metronix", "metergraph")

MCP_ENVIRONMENT = (
    """\
environment, metronix:
  TRIPTYCH_AGENT_ID          the connection's agent: memory tools then act as this agent only
  TRIPTYCH_DATA_DIR          data directory (or --data-dir; default: the user data directory)
  TRIPTYCH_DEFAULT_WORKSPACE workspace of calls that omit workspace_id (default: default)
  TRIPTYCH_LOG_LEVEL         log level on stderr (default here: warning)
  TRIPTYCH_EMBED_URL, TRIPTYCH_EMBED_MODEL, TRIPTYCH_EMBED_API_KEY
                             an OpenAI-compatible embeddings endpoint instead of the bundled model
  TRIPTYCH_EMBED_THREADS, TRIPTYCH_MODEL_CACHE, TRIPTYCH_CHUNK_TOKENS
                             bundled-model threads, its cache folder, chunk size
  TRIPTYCH_MCP_SOURCES, TRIPTYCH_SYNC_TIMEOUT
                             the metronix_sync source registry and its per-request timeout
  METRONIX_MEMORY_*, METRONIX_FRESHNESS_*
                             agent-memory settings (README, Configuration)
environment, metergraph (the same as `triptych metergraph-mcp`):
"""
    + BRIDGE_ENVIRONMENT
)


def _settings(args: argparse.Namespace) -> Settings:
    from triptych.core.config import load_settings

    return load_settings(
        host=getattr(args, "host", None),
        port=getattr(args, "port", None),
        data_dir=getattr(args, "data_dir", None),
    )


def _log_to_stderr(level: str, fmt: LogFormat = "text") -> None:
    from triptych.core.logs import configure

    configure(level, fmt)


def _problem(exc: ValueError) -> str:
    """A configuration error as the operator needs it: each bad setting by its variable name, what is
    wrong and what was given, instead of pydantic's multi-line report with a documentation link."""
    from pydantic import ValidationError

    if not isinstance(exc, ValidationError):
        return str(exc)
    lines = [
        f"invalid setting {'.'.join(str(part) for part in e['loc']) or exc.title}: {e['msg']} (got {e['input']!r})"
        for e in exc.errors(include_url=False)
    ]
    return "; ".join(lines) + " (the settings are listed under Configuration in README.md)"


def _start(args: argparse.Namespace) -> int | tuple[Settings, Any, Any, bool]:
    """The settings, the worker socket (a worker of ``serve --workers N``), the app (None: this process
    is to supervise workers) and whether the data directory was new; or the exit status of a refusal."""
    from triptych.core.db import check_writable
    from triptych.core.errors import StorageUnavailable
    from triptych.supervisor import worker_socket

    try:
        settings = _settings(args)
        unshared = _machine_local_secrets(settings)
    except ValueError as exc:  # a setting out of range or malformed
        print(f"triptych: {_problem(exc)}", file=sys.stderr)
        return 2
    if unshared:
        print(f"triptych: {unshared}", file=sys.stderr)
        return 2
    _log_to_stderr(settings.log_level, settings.log_format)
    sock = worker_socket()
    if sock is None and args.workers > 1:
        return settings, None, None, False
    if sock is None:
        # Before the slow start: uvicorn would only find the port taken after printing "serving on" and
        # "ready", then stop with its own errno line.
        taken = _cannot_listen(settings.host, settings.port)
        if taken is not None:
            print(f"triptych: {taken}", file=sys.stderr)
            return 1
    fresh = is_fresh(settings.data_dir)  # before create_app makes the databases
    try:
        check_writable(settings.data_dir)
        app = _app(settings, worker=sock is not None)
    except ValueError as exc:  # a configuration problem, said plainly
        print(f"triptych: {_problem(exc)}", file=sys.stderr)
        return 2
    except StorageUnavailable as exc:  # one line naming the folder, the cause and the remedy
        hint = (exc.hint or "").replace("then retry; reads keep working", "then start triptych again")
        print(
            f"triptych: cannot start: {exc.message.replace(': nothing was written', '')}. {hint}",
            file=sys.stderr,
        )
        return 1
    return settings, sock, app, fresh


def cmd_serve(args: argparse.Namespace) -> int:
    with uncollected_startup():
        started = _start(args)
    if isinstance(started, int):
        return started
    settings, sock, app, fresh = started
    if app is None:  # `serve --workers N`: this process supervises them
        return _serve_workers(args, settings)
    if sock is not None:  # a worker of `serve --workers N`: the supervisor speaks for all of them
        return _run_worker(app, settings, sock)
    import uvicorn

    from triptych.supervisor import REQUEST_GRACE

    print(
        f"triptych {__version__}: serving on http://{settings.host}:{settings.port} "
        f"({_where_data_lives(settings, fresh)}; auth {'on' if settings.auth_enabled else 'off'})",
        file=sys.stderr,
        flush=True,
    )
    _say_start_warnings(settings)
    # SIGTERM: uvicorn stops accepting, lets the requests in flight finish (an open stream is cut after
    # the grace, so a held Hadron stream cannot keep the process forever), then re-raises the signal:
    # ending there with 0 tells a service manager the stop was clean.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    if settings.peers:  # one machine of several: sessions held by another machine are relayed there
        from triptych.peers import relayed

        app = relayed(app, settings.peers)[0]
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        access_log=False,
        log_config=None,
        timeout_graceful_shutdown=REQUEST_GRACE,
    )
    return 0


def _listen_refusal(host: str, port: int, exc: OSError) -> str:
    import errno

    said = f"cannot listen on {host}:{port}: {exc.strerror or exc}"
    if exc.errno != errno.EADDRINUSE:
        return said
    return (
        f"{said} (another server holds that port, perhaps a triptych serve started earlier: stop it,"
        " or choose another port with --port)"
    )


def _cannot_listen(host: str, port: int) -> str | None:
    """Why ``serve`` could not listen on ``host:port``, or None. A bind without listening, released at
    once, with the SO_REUSEADDR uvicorn sets too: a port held by a listening server is refused, one left
    in TIME_WAIT by a server just stopped is not."""
    import socket

    probe = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((host, port))
    except OSError as exc:
        return _listen_refusal(host, port, exc)
    finally:
        probe.close()
    return None


LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")
# RFC 7518 3.2: an HS256 key at least as long as the hash (32 bytes); a shorter one can be guessed
# offline from any token it signed, and whoever guesses it mints admin tokens.
HS256_KEY_BYTES = 32


def _say_start_warnings(settings: Settings) -> None:
    """What would stop or expose a newcomer later, said beside the start line (decision 0470)."""
    _say_reach(settings)
    _say_weak_secret(settings)


def _say_weak_secret(settings: Settings) -> None:
    """With auth on, a JWT secret shorter than HS256 needs is said at start (tokens still verify)."""
    secret = settings.jwt_secret
    if not settings.auth_enabled or secret is None or len(secret.encode()) >= HS256_KEY_BYTES:
        return
    print(
        f"triptych: TRIPTYCH_JWT_SECRET is {len(secret.encode())} bytes, shorter than the {HS256_KEY_BYTES}"
        " HS256 needs (RFC 7518): anyone holding one token could guess it and mint an admin's. Make one"
        " with `python3 -c 'import secrets; print(secrets.token_urlsafe(48))'` and mint tokens again",
        file=sys.stderr,
    )


def _say_reach(settings: Settings) -> None:
    """On an address other machines reach, what the defaults mean for them: the MCP endpoints refuse
    their Host names (421) while TRIPTYCH_ALLOWED_HOSTS names loopback only, and with auth off anyone
    reaching the port reads and writes. Said once at start, where the operator looks first."""
    if settings.host in LOOPBACK or settings.host.startswith("127."):
        return
    said = []
    if all(pattern.rsplit(":", 1)[0] in LOOPBACK for pattern in settings.allowed_hosts):
        said.append(
            "its MCP endpoints answer only the Host names in TRIPTYCH_ALLOWED_HOSTS"
            f" ({','.join(settings.allowed_hosts)}), others get 421 Invalid Host header: add the names"
            " clients use, e.g. TRIPTYCH_ALLOWED_HOSTS=127.0.0.1:*,localhost:*,triptych.internal:*"
        )
    if not settings.auth_enabled:
        said.append(
            "auth is off, so anyone who reaches the port reads and writes all its data:"
            " set TRIPTYCH_AUTH_ENABLED=true and TRIPTYCH_JWT_SECRET"
        )
    if said:
        print(
            f"triptych: listening on {settings.host}, beyond this machine: {'; '.join(said)}", file=sys.stderr
        )


def _machine_local_secrets(settings: Settings) -> str | None:
    """On one machine of several (``TRIPTYCH_PEERS``), the Metergraph secrets left to a file of this data
    directory: each machine would make its own, and a page session or webhook secret made on one would
    not open on another (decision record 0201). None when there are none, or one machine."""
    from triptych.metergraph.settings import load_metergraph_settings
    from triptych.metergraph.webhook_http import load_webhook_settings

    if not settings.peers:
        return None
    missing = [name for name, value in (("MG_WEB_SECRET", load_metergraph_settings().web_secret),
               ("MG_WEBHOOK_KEY", load_webhook_settings().key)) if not value]  # fmt: skip
    if not missing:
        return None
    return (
        f"TRIPTYCH_PEERS names other machines, so set {' and '.join(missing)} to the same value on every"
        " machine (unset, each machine keeps its own in its data directory, and what one signs or seals"
        " the others refuse)"
    )


def _where_data_lives(settings: Settings, fresh: bool) -> str:
    """Each surface's endpoint, engine and where its data is, for the start line: in server mode the
    data directory holds only what the shared engines do not (it said "new and empty" while every
    Metronix and Hadron record was in PostgreSQL)."""
    from triptych.core.pg import redacted
    from triptych.metergraph.settings import load_metergraph_settings

    clickhouse = load_metergraph_settings().clickhouse_url
    if not settings.database_url and not clickhouse:
        return "Metronix /mcp, Hadron /hadron/mcp and Metergraph /v1/agent/mcp on SQLite in the " + describe(
            settings.data_dir, fresh
        )
    if settings.database_url:
        shared = f"Metronix /mcp and Hadron /hadron/mcp on PostgreSQL {redacted(settings.database_url)}"
    else:
        shared = "Metronix /mcp and Hadron /hadron/mcp on SQLite in the data directory"
    # Keys, routes, batch records and the control data (incidents, webhooks, analysis runs and reports,
    # workloads, import sync) follow TRIPTYCH_DATABASE_URL; the calls, ClickHouse's URL.
    on_pg = (
        "keys, routes, incidents, webhooks, analysis runs and reports, workloads, import sync on PostgreSQL"
    )
    on_ch = f"calls on ClickHouse {redacted(clickhouse)}" if clickhouse else ""
    if not settings.database_url:
        metergraph = (
            f"Metergraph /v1/agent/mcp: {on_ch}, keys, routes and reports on SQLite in the "
            + describe(settings.data_dir, fresh, "Metergraph key, route or report")
        )
    elif not clickhouse:
        metergraph = f"Metergraph /v1/agent/mcp: {on_pg}, calls on SQLite in the " + describe(
            settings.data_dir, fresh, "Metergraph call"
        )
    else:
        metergraph = f"Metergraph /v1/agent/mcp: {on_ch}, {on_pg}"
    return f"{shared}; {metergraph}"


def _app(settings: Settings, worker: bool) -> Any:
    from triptych.app import create_app

    if worker:
        from triptych.supervisor import die_with_supervisor

        die_with_supervisor()  # before the slow start: no orphan if the supervisor is gone meanwhile
    return create_app(settings)


def _run_worker(app: Any, settings: Settings, sock: Any) -> int:
    import uvicorn

    from triptych.peers import forget_socket, relayed
    from triptych.supervisor import REQUEST_GRACE, named_worker, report_ready

    class Worker(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            if not self.should_exit:
                report_ready()

    # Outermost, the relay: a relayed answer keeps the X-Triptych-Worker of the worker that gave it.
    app, own = relayed(named_worker(app), settings.peers)
    config = uvicorn.Config(
        app,
        log_level=settings.log_level,
        access_log=False,
        log_config=None,  # the root logger's format (core/logs.py), text or JSON
        timeout_graceful_shutdown=REQUEST_GRACE,
    )
    own_path = None if own is None else Path(own.getsockname())  # uvicorn closes the socket itself
    # uvicorn re-raises the stop signal after its graceful shutdown; with the default handler the
    # process would die there, before the clean-up below.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    try:
        Worker(config).run(sockets=[sock] if own is None else [sock, own])
    finally:
        if own_path is not None:
            forget_socket(own_path)
    return 0


def _serve_workers(args: argparse.Namespace, settings: Settings) -> int:
    from triptych.core.db import check_writable
    from triptych.core.errors import StorageUnavailable
    from triptych.supervisor import Supervisor, listen

    if not settings.database_url:
        print(
            f"triptych: --workers {args.workers} needs the PostgreSQL engine: set TRIPTYCH_DATABASE_URL="
            "postgresql://... (the embedded SQLite engine serves one worker; docs/decisions.md says why)",
            file=sys.stderr,
        )
        return 2
    fresh = is_fresh(settings.data_dir)
    try:
        check_writable(settings.data_dir)
        sockets = listen(settings.host, settings.port, args.workers)
    except StorageUnavailable as exc:
        print(f"triptych: cannot start: {exc.message.replace(': nothing was written', '')}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"triptych: {_listen_refusal(settings.host, settings.port, exc)}", file=sys.stderr)
        return 1

    def say(line: str) -> None:
        print(f"triptych: {line}", file=sys.stderr, flush=True)

    def ready(pids: list[int]) -> None:
        say(
            f"{__version__} serving on http://{settings.host}:{settings.port} with {len(pids)} workers"
            f" (pids {', '.join(map(str, pids))}; {_where_data_lives(settings, fresh)};"
            f" auth {'on' if settings.auth_enabled else 'off'})"
        )
        _say_start_warnings(settings)

    command = [
        sys.executable,
        "-m",
        "triptych",
        "serve",
        "--host",
        settings.host,
        "--port",
        str(settings.port),
    ]
    command += ["--data-dir", str(settings.data_dir)]
    if not settings.embed_threads:
        # The bundled model's threads default to every core in each worker: N workers would run N times
        # as many as there are cores, and lose to the switching (measured: "Embedding threads per worker"
        # in docs/benchmarks/history-2026-11-30-to-2026-12-02.md).
        os.environ["TRIPTYCH_EMBED_THREADS"] = str(max(1, (os.cpu_count() or 1) // args.workers))
    try:
        return Supervisor(args.workers, sockets, command, say, ready).run()
    finally:
        for sock in sockets:
            sock.close()


def cmd_mcp(args: argparse.Namespace) -> int:
    if args.surface == "metergraph":
        # A stdio bridge to a running server's /v1/agent/mcp (METERGRAPH_URL, METERGRAPH_AGENT_TOKEN).
        from triptych.metergraph.bridge import main as metergraph_bridge

        return metergraph_bridge()

    import anyio
    from mcp.server.stdio import stdio_server

    from triptych.metronix.surface import Metronix

    settings = _settings(args)
    # stdout carries the protocol: every log line goes to stderr.
    _log_to_stderr(settings.log_level if settings.log_level != "info" else "warning")
    metronix = Metronix.open(settings)
    server = metronix.mcp_server(stdio_agent_id=os.environ.get("TRIPTYCH_AGENT_ID"))

    async def run() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    try:
        anyio.run(run)
    finally:
        metronix.close()
    return 0


# Variables read outside the settings models (before any is built, or by one module alone).
OTHER_ENVIRONMENT = (
    ("TRIPTYCH_WORKERS", "1", False),
    ("TRIPTYCH_AGENT_ID", "—", False),
    ("TRIPTYCH_MODEL_CACHE", "~/.cache/triptych/models", False),
    ("TRIPTYCH_GIT_TIMEOUT", "120", False),
    ("TRIPTYCH_HADRON_KEY", "—", True),
    ("TRIPTYCH_HADRON_KEY_FILE", "—", False),
)


def settings_sections(data_dir: Path | None = None) -> list[tuple[str, list[Any]]]:
    """Every setting the server reads, by section, with its value and source (``triptych config``)."""
    from triptych.core.config import load_settings
    from triptych.core.settings_report import OtherSetting, other_rows, rows
    from triptych.metergraph.detectors import load_incident_settings
    from triptych.metergraph.providers import load_provider_settings
    from triptych.metergraph.settings import load_metergraph_settings
    from triptych.metergraph.webhook_http import load_webhook_settings

    return [
        ("server", rows(load_settings(data_dir=data_dir), {"data_dir": data_dir})),
        ("process", other_rows(OtherSetting(*other) for other in OTHER_ENVIRONMENT)),
        ("metergraph", rows(load_metergraph_settings())),
        ("metergraph incidents", rows(load_incident_settings())),
        ("metergraph webhooks", rows(load_webhook_settings())),
        ("metergraph replay", rows(load_provider_settings())),
    ]


def cmd_config(args: argparse.Namespace) -> int:
    """``triptych config``: every setting, its effective value and where it came from; secrets masked."""
    from triptych.core.settings_report import table

    try:
        sections = settings_sections(args.data_dir)
    except ValueError as exc:
        print(f"triptych: {_problem(exc)}", file=sys.stderr)
        return 2
    print(table(sections))
    return 0


def cmd_token(args: argparse.Namespace) -> int:
    from triptych.core.auth import mint_token

    settings = _settings(args)
    if not settings.jwt_secret:
        print(
            "triptych: set TRIPTYCH_JWT_SECRET (or METRONIX_SECRET_KEY) to mint HS256 tokens", file=sys.stderr
        )
        return 2
    token = mint_token(settings.jwt_secret, args.user, args.role, args.workspace or [], args.ttl)
    print(token)
    scope = (
        ", ".join(args.workspace)
        if args.workspace
        else ("all workspaces" if args.role == "admin" else "none")
    )
    print(f"minted {args.role} token for {args.user} ({scope}), valid {args.ttl} s", file=sys.stderr)
    return 0


def cmd_reindex(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from triptych.metronix.surface import Metronix

    settings = _settings(args)
    metronix = Metronix.open(settings)
    try:
        total = metronix.knowledge.store.count_chunks()
        with tqdm(total=total, unit="chunk", desc="re-embedding chunks", file=sys.stderr) as bar:
            done = metronix.knowledge.reindex(bar.update)
        total = metronix.memory.store.count_records()
        with tqdm(total=total, unit="record", desc="re-embedding memory records", file=sys.stderr) as bar:
            records = metronix.memory.reindex(bar.update)
    finally:
        metronix.close()
    print(
        f"re-embedded {done} chunks and {records} memory records with {metronix.embedder.name}"
        f" ({metronix.embedder.dim} dimensions)"
    )
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    from functools import partial

    from triptych.core.errors import TriptychError
    from triptych.core.pg import redacted
    from triptych.core.progress import TableBars
    from triptych.hadron import migrate as hadron_migrate
    from triptych.metergraph import migrate as metergraph_migrate
    from triptych.metronix import migrate as metronix_migrate

    settings = _settings(args)
    progress = TableBars()
    # Server mode keeps Hadron in the database too: it moves beside Metronix's data, either way; a
    # source that holds Hadron's data alone (no Metronix there) moves Hadron alone.
    if args.to:
        source = str(settings.data_dir)
        has_hadron = _holds_hadron_data(settings.data_dir / "hadron.db")
        no_metronix = None if (settings.data_dir / "metronix.db").is_file() else "no metronix.db"
        hadron = partial(hadron_migrate.migrate_to_postgres, settings.data_dir, args.to, progress)
        has_metergraph = metergraph_migrate.holds_data(settings.data_dir)
        metergraph = partial(metergraph_migrate.migrate_to_postgres, settings.data_dir, args.to, progress)
        following = (
            f"start the server with TRIPTYCH_DATABASE_URL={redacted(args.to)} (the data directory was only"
            " read; Metergraph's calls stay in it)"
        )
    else:
        source = redacted(args.source)
        has_hadron = hadron_migrate.holds_data(args.source)
        missing = metronix_migrate.missing_table(args.source)
        no_metronix = None if missing is None else f"no table {missing}"
        hadron = partial(hadron_migrate.migrate_to_embedded, args.source, settings.data_dir, progress)
        has_metergraph = metergraph_migrate.holds_postgres_data(args.source)
        metergraph = partial(metergraph_migrate.migrate_to_embedded, args.source, settings.data_dir, progress)
        following = (
            f"start the server with --data-dir {settings.data_dir}, TRIPTYCH_DATABASE_URL unset and the same"
            f" Hadron key, if any ({redacted(args.source)} was only read)"
        )

    alone = (has_hadron or has_metergraph) and no_metronix is not None
    if alone:
        which = " and ".join(
            n for n, has in (("Hadron's", has_hadron), ("Metergraph's", has_metergraph)) if has
        )
        print(f"{source} holds no Metronix data ({no_metronix}): copying {which} alone")
    else:
        try:
            if args.to:
                # The dimension comes from the stored data; 384 (the bundled model) only for an empty source.
                copied = metronix_migrate.migrate_to_postgres(
                    settings.data_dir, args.to, progress, default_dim=384
                )
            else:
                copied = metronix_migrate.migrate_to_embedded(args.source, settings.data_dir, progress)
        except TriptychError as exc:
            print(f"triptych: {exc.message}. {exc.hint or ''}".rstrip(), file=sys.stderr)
            return 1
        finally:
            progress.close()
        print(copied.report())
    if has_hadron:
        try:
            print(hadron().report())
        except TriptychError as exc:
            flag = "--to" if args.to else "--from"
            then = "" if alone else f" Then copy Hadron alone: triptych hadron migrate {flag} URL"
            done = "" if alone else "Metronix's data was copied, Hadron's was not: "
            print(f"triptych: {done}{exc.message}. {exc.hint or ''}{then}".rstrip(), file=sys.stderr)
            return 1
        finally:
            progress.close()
    if has_metergraph:
        try:
            print(metergraph().report())
        except TriptychError as exc:
            done = (
                ""
                if alone and not has_hadron
                else "the other surfaces' data was copied, Metergraph's was not: "
            )
            print(f"triptych: {done}{exc.message}. {exc.hint or ''}".rstrip(), file=sys.stderr)
            return 1
        finally:
            progress.close()
    print(f"next: {following}", file=sys.stderr)
    return 0


def _holds_hadron_data(path: Path) -> bool:
    """Whether an embedded ``hadron.db`` holds anything to copy (every server start creates an empty one)."""
    if not path.is_file():
        return False
    import sqlite3

    try:
        with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
            row = conn.execute(
                "SELECT EXISTS (SELECT 1 FROM orgs) OR EXISTS (SELECT 1 FROM nodes)"
            ).fetchone()
    except sqlite3.Error:
        return True  # an older or odd file: the copy itself says what is wrong with it
    return bool(row[0])


def cmd_kb_import(args: argparse.Namespace) -> int:
    import time

    from triptych.core.auth import local_principal
    from triptych.core.progress import ImportBar
    from triptych.metronix.importer import import_paths
    from triptych.metronix.surface import Metronix

    settings = _settings(args)
    _log_to_stderr("warning")
    # The bulk embedding keeps its default threads (all cores but one): a second thread on one batch did
    # not pay for ~200-token chunks (bench/kb_import_threads.py, docs/benchmarks.md, 2026-12-04).
    metronix = Metronix.open(settings)
    bar = ImportBar()
    try:
        summary = import_paths(
            metronix.knowledge, local_principal(), args.workspace, [Path(p) for p in args.paths], bar
        )
    except FileNotFoundError as exc:
        print(f"triptych: {exc}", file=sys.stderr)
        return 2
    finally:
        bar.close()
        metronix.close()
    head, *details = summary.report(args.workspace)
    print(head)
    for line in details:
        print(line, file=sys.stderr)
    if bar.embedded:
        seconds = time.monotonic() - bar.started
        print(
            f"embedded {bar.embedded:,} chunks in {seconds:.1f} s ({bar.rate():.1f} chunks/s)",
            file=sys.stderr,
        )
    # A failure, or nothing importable at all, is worth a non-zero exit for a script.
    return 1 if summary.failed or not (summary.stored or summary.unchanged) else 0


def cmd_sources(args: argparse.Namespace) -> int:
    from triptych.core.errors import Invalid
    from triptych.core.mcp_sources import load_sources, parse_source, save_sources, sources_path

    settings = _settings(args)
    path = sources_path(settings.data_dir, settings.mcp_sources)
    try:
        sources = load_sources(path)
        if args.sources_command == "list":
            if not sources:
                print(f"no MCP sources registered in {path}")
            for source in sources.values():
                where = " ".join([source.command or "", *source.args]) if source.command else source.url
                print(f"{source.name}\t{source.transport}\t{where}")
            return 0
        if args.sources_command == "remove":
            if args.name not in sources:
                print(f"triptych: no source named {args.name!r} in {path}", file=sys.stderr)
                return 2
            del sources[args.name]
            save_sources(path, sources)
            print(f"removed source {args.name!r} from {path}")
            return 0
        pairs = dict(item.split("=", 1) for item in (args.env or []) + (args.header or []) if "=" in item)
        spec: dict[str, Any] = (
            {"command": args.command, "args": args.arg or [], "env": pairs}
            if args.command
            else {"url": args.url, "headers": pairs}
        )
        sources[args.name] = parse_source(args.name, spec)
        save_sources(path, sources)
        print(f"registered source {args.name!r} ({sources[args.name].transport}) in {path}")
        return 0
    except Invalid as exc:
        print(f"triptych: {exc.message}", file=sys.stderr)
        return 2


KB_IMPORT_DESCRIPTION = """\
Import files and folders into the knowledge base, one document per file.

What it reads, decided by each file's content, not only its extension:
  - Markdown (.md, .markdown): titled by its first '# ' heading;
  - HTML (.html, .htm, or a file that starts with <!doctype html> or <html>): the page's
    text without scripts, styles and navigation, titled by <title> or the first <h1>;
  - any other text file, with or without an extension (README, NOTES, .txt, .rst, source
    code, ...), in UTF-8, UTF-16 with a byte-order mark, or a detected legacy encoding;
  - gzip (.gz), bzip2 (.bz2) and xz (.xz) compressed files: the text they hold.
What it skips, each with its reason on stderr: binary content (images, PDF, archives,
executables, anything with NUL bytes), empty files, hidden files and folders inside a folder
(names starting with '.'), links to folders inside a folder (not followed), files over
20,000,000 bytes or 5,000,000 characters.

Each document is labelled file:<absolute path>: two README files in different folders stay
two documents, and a rerun (from any directory) skips unchanged files and updates changed
ones. A label that already holds a document not imported from that file is never replaced.
The summary counts documents stored (new and changed), unchanged, skipped and failed, and the
workspace's total. Exit status: 0, or 1 if a file failed or nothing was importable.
"""


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"the number of workers must be a whole number >= 1 (got {text!r})")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="triptych", description="Triptych: a context server for AI agents.")
    parser.add_argument("--version", action="version", version=f"triptych {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    data_dir: dict[str, Any] = {
        "type": Path,
        "help": DATA_DIR_HELP,
    }

    serve = sub.add_parser(
        "serve",
        help="start the HTTP server (all three MCP endpoints)",
        description="Start the HTTP server: Metronix at /mcp, Hadron at /hadron/mcp, Metergraph at"
        " /v1/agent/mcp (and its ingest at /v1/ingest), GET /health (200 once ready).",
        epilog="Every setting is also an environment variable; `triptych config` prints each with its value"
        " and source. Serving other machines (--host 0.0.0.0) needs their Host names in"
        " TRIPTYCH_ALLOWED_HOSTS and, to keep them out of your data, TRIPTYCH_AUTH_ENABLED=true with"
        " TRIPTYCH_JWT_SECRET (README, Configuration and Server mode).",
    )
    serve.add_argument("--host", help="interface to bind (default 127.0.0.1, or TRIPTYCH_HOST)")
    serve.add_argument("--port", type=int, help="port (default 8000, or TRIPTYCH_PORT)")
    serve.add_argument("--data-dir", **data_dir)
    serve.add_argument(
        "--workers",
        type=_positive,
        default=os.environ.get("TRIPTYCH_WORKERS", "1"),  # argparse applies the type to it
        help="worker processes sharing the port (default 1, or TRIPTYCH_WORKERS); more than one needs"
        " TRIPTYCH_DATABASE_URL",
    )
    serve.set_defaults(func=cmd_serve)

    mcp = sub.add_parser(
        "mcp",
        help="serve one surface over stdio, for MCP hosts that launch a process",
        description="Serve one surface over stdio (the protocol on stdout, logs on stderr).",
        epilog=MCP_ENVIRONMENT,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    mcp.add_argument("surface", choices=SURFACES, help="metronix (served here) or metergraph (a bridge)")
    mcp.add_argument("--data-dir", **data_dir)
    mcp.set_defaults(func=cmd_mcp)

    config = sub.add_parser(
        "config",
        help="print every setting, its effective value and where it came from (secrets masked)",
        description="Every setting the server reads: its environment variables, its effective value (secrets"
        " masked, passwords in URLs hidden) and its source: flag, environment (NAME) or default.",
    )
    config.add_argument("--data-dir", **data_dir)
    config.set_defaults(func=cmd_config)

    token = sub.add_parser("token", help="print an HS256 JWT signed with TRIPTYCH_JWT_SECRET")
    token.add_argument("--user", required=True, help="the sub claim")
    token.add_argument("--role", choices=("admin", "editor", "viewer"), default="editor")
    token.add_argument("--workspace", action="append", help="a granted workspace (repeat for several)")
    token.add_argument("--ttl", type=int, default=86_400, help="lifetime in seconds (default 86400)")
    token.set_defaults(func=cmd_token)

    reindex = sub.add_parser(
        "reindex", help="re-embed every stored chunk and memory record with the configured embedding model"
    )
    reindex.add_argument("--data-dir", **data_dir)
    reindex.set_defaults(func=cmd_reindex)

    migrate = sub.add_parser(
        "migrate",
        help="move Metronix's data (knowledge base, memory, reviews) and Hadron's between a data directory"
        " and PostgreSQL",
    )
    way = migrate.add_mutually_exclusive_group(required=True)
    way.add_argument(
        "--to", help="into PostgreSQL: postgresql://user:password@host:5432/db (from --data-dir)"
    )
    way.add_argument(
        "--from",
        dest="source",
        help="back from PostgreSQL (postgresql://...) into --data-dir, which must hold no Metronix or Hadron data",
    )
    migrate.add_argument("--data-dir", **data_dir)
    migrate.set_defaults(func=cmd_migrate)

    sources = sub.add_parser(
        "sources", help="the MCP sources metronix_sync reads (.metronix/mcp_servers.json)"
    )
    with_data_dir = argparse.ArgumentParser(add_help=False)
    with_data_dir.add_argument("--data-dir", **data_dir)
    sources_sub = sources.add_subparsers(dest="sources_command", required=True)
    sources_sub.add_parser("list", help="list registered sources", parents=[with_data_dir])
    add = sources_sub.add_parser(
        "add", help="register a source (stdio --command or streamable HTTP --url)", parents=[with_data_dir]
    )
    add.add_argument("name", help="source name (1-64 of A-Z a-z 0-9 . _ -)")
    how = add.add_mutually_exclusive_group(required=True)
    how.add_argument("--command", help="executable of a stdio MCP server")
    how.add_argument("--url", help="URL of a streamable HTTP MCP server")
    add.add_argument("--arg", action="append", help="an argument of --command (repeat)")
    add.add_argument("--env", action="append", help="KEY=VALUE for --command's environment (repeat)")
    add.add_argument("--header", action="append", help="KEY=VALUE HTTP header for --url (repeat)")
    remove = sources_sub.add_parser("remove", help="unregister a source", parents=[with_data_dir])
    remove.add_argument("name")
    sources.set_defaults(func=cmd_sources)

    kb = sub.add_parser("kb", help="knowledge-base commands")
    kb_sub = kb.add_subparsers(dest="kb_command", required=True)
    kb_import = kb_sub.add_parser(
        "import",
        help="import files and folders of text (Markdown, HTML, plain text, compressed text)",
        description=KB_IMPORT_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    kb_import.add_argument("paths", nargs="+", help="files or folders (folders are read recursively)")
    kb_import.add_argument("--workspace", default="default", help="target workspace (default 'default')")
    kb_import.add_argument("--data-dir", **data_dir)
    kb_import.set_defaults(func=cmd_kb_import)

    from triptych.hadron.cli import register as register_hadron

    register_hadron(sub)

    from triptych.metergraph.cli import register as register_metergraph

    register_metergraph(sub)

    from triptych.backup_cli import register as register_backup

    register_backup(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # One BLAS thread per process, set before numpy loads. Our matrix products are single queries
    # against at most ~100k vectors; splitting one across cores buys little idle and costs a lot when
    # the cores are busy (memory_search over MCP at 10,000 records, load 4-5: p50 85 ms with
    # OpenBLAS's default threads, 54 ms with one; bench/locomo.py scale phase). An operator's own
    # setting wins.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    args = build_parser().parse_args(argv)
    bridge = args.command == "mcp" and args.surface == "metergraph"  # a bridge to a server: no data here
    if args.command != "serve" and "data_dir" in vars(args) and not bridge:
        # Every command on the embedded data names the directory it uses (and says when it is new), so a
        # key minted into the wrong directory is noticed at once. serve says it in its banner.
        from triptych.core.config import load_settings

        data_dir = load_settings(data_dir=args.data_dir).data_dir
        print(f"triptych: {describe(data_dir, is_fresh(data_dir))}", file=sys.stderr, flush=True)
    result: int = args.func(args)
    return result
