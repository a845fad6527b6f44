#!/usr/bin/env python3
"""Set up and run Triptych with nothing but Python 3.11+.

    python3 tasks.py serve [triptych serve flags]   # set up .venv, start the server on 127.0.0.1:8000
    python3 tasks.py test [pytest args]             # set up .venv and .venv-mcp1, lint, type-check, run tests
                                                     # (the whole suite reports coverage, with a floor),
                                                     # on one pytest-xdist worker per core (TRIPTYCH_TEST_WORKERS)
    python3 tasks.py bench NAME [options]            # run a benchmark (see bench/README.md)

Both setup steps are idempotent: packages are (re)installed only when pyproject.toml or a
constraints file changed since the last run.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import venv
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
VENV_MCP1 = ROOT / ".venv-mcp1"  # the 1.x MCP client, for the contract's own Python example
# The products' own client packages, each in an environment of its own (tests/clients/README.md).
CLIENTS = ROOT / "tests" / "clients"
# The MCP Inspector CLI and the Node it needs (>= 22.19), from the npm registry, for the test that drives
# all three endpoints with it (tests/contract/test_inspector.py).
INSPECTOR = ROOT / ".inspector"
INSPECTOR_PACKAGES = ["node@22", "@modelcontextprotocol/inspector@2.12.0"]
CHROMIUM = "/usr/bin/chromium"  # Debian's package, for the app-page tests (tests/browser.py)
OLD_CLICKHOUSE = "/usr/sbin/clickhouse-server"  # Debian's 18.16, refused by version (tests/metergraph)


def _bin(env: Path, name: str) -> Path:
    return env / ("Scripts" if os.name == "nt" else "bin") / name


def _run(*cmd: str | Path, env: dict[str, str] | None = None) -> None:
    print("+", " ".join(str(c) for c in cmd), flush=True)
    subprocess.run([str(c) for c in cmd], check=True, cwd=ROOT, env=env)


def _digest(inputs: list[Path], install: list[str], python: str = "") -> str:
    data = b"".join(p.read_bytes() for p in inputs) + " ".join(install).encode() + python.encode()
    return hashlib.sha256(data).hexdigest()


def _project_python() -> tuple[str, str]:
    """The interpreter for ``.venv`` and its version: ``TRIPTYCH_PYTHON`` if set, else
    ``python3.12`` on PATH if it runs, else this one. 3.12 first because coverage measures there through
    ``sys.monitoring`` (pyproject.toml, ``core = "sysmon"``) at a fraction of the cost of 3.11's trace
    function, in the test process and in every server it starts (docs/decisions/0230)."""
    wanted = os.environ.get("TRIPTYCH_PYTHON")
    for candidate in [wanted] if wanted else ["python3.12", *_pyenv_pythons("3.12")]:
        path = shutil.which(candidate)
        if not path:
            continue
        done = subprocess.run(
            [path, "-c", "import sys, venv, ensurepip; print('.'.join(map(str, sys.version_info[:3])))"],
            capture_output=True,
            text=True,
        )
        if done.returncode == 0:
            return path, done.stdout.strip()
        if wanted:
            sys.exit(f"TRIPTYCH_PYTHON={wanted} does not run: {done.stderr.strip()[-500:]}")
    return sys.executable, ".".join(map(str, sys.version_info[:3]))


def _pyenv_pythons(minor: str) -> list[str]:
    """pyenv's installed interpreters of one minor version, newest first: its shim only runs the version
    selected globally, so look in its root."""
    pyenv = shutil.which("pyenv")
    if not pyenv:
        return []
    done = subprocess.run([pyenv, "root"], capture_output=True, text=True)
    if done.returncode != 0:
        return []
    found = {
        p.parent.parent.name: p
        for p in Path(done.stdout.strip()).glob(f"versions/{minor}.*/bin/python{minor}")
    }
    # Release versions only ("3.12.1", not "3.12-dev"), highest patch first.
    releases = [v for v in found if v.removeprefix(f"{minor}.").isdigit()]
    return [
        str(found[v]) for v in sorted(releases, key=lambda v: int(v.removeprefix(f"{minor}.")), reverse=True)
    ]


def _venv_version(env: Path) -> str:
    """The Python version a venv was made with (its ``pyvenv.cfg``), or "" if unknown."""
    cfg = env / "pyvenv.cfg"
    for line in cfg.read_text().splitlines() if cfg.exists() else []:
        key, _, value = line.partition("=")
        if key.strip() in {"version", "version_info"}:
            return value.strip()
    return ""


def _new_venv(env: Path, with_pip: bool = True) -> None:
    """A clean venv of this interpreter, linked to it rather than copied (as `python -m venv` does on
    POSIX). A copied interpreter is a file this process writes while other setup threads fork: a child
    still holding it open makes the new interpreter's first exec fail with "Text file busy" (ETXTBSY,
    stop 37's CI)."""
    venv.EnvBuilder(with_pip=with_pip, clear=True, symlinks=os.name != "nt").create(env)


def _ensure(
    env: Path,
    inputs: list[Path],
    install: list[str],
    also_fine: list[str] | None = None,
    python: tuple[str, str] | None = None,
) -> None:
    """Install unless the venv's stamp says this (or a superset, ``also_fine``) is already installed, by
    the same interpreter (``python``: its path and version; this one when not given)."""
    if sys.version_info < (3, 11):  # noqa: UP036  (this file runs on whatever python3 is)
        sys.exit(f"Python 3.11 or newer is needed (this is {sys.version.split()[0]})")
    interpreter, version = python or (sys.executable, "")
    stamp = env / ".triptych-stamp"
    digest = _digest(inputs, install, version)
    current = stamp.read_text() if stamp.exists() else None
    if current in {digest, *(also_fine or [])} and _bin(env, "python").exists():
        return
    if not _bin(env, "python").exists() or (version and _venv_version(env) != version):
        # A new venv, or one made by another interpreter: start clean, so that no package built for
        # another Python version is left behind.
        print(f"creating {env.name} with Python {version or sys.version.split()[0]} ...", flush=True)
        if interpreter == sys.executable:
            _new_venv(env)
        else:
            _run(interpreter, "-m", "venv", "--clear", env)
    _run(_bin(env, "python"), "-m", "pip", "install", "--quiet", "--upgrade", "pip")
    _run(_bin(env, "python"), "-m", "pip", "install", "--quiet", *install)
    stamp.write_text(digest)


def setup(dev: bool) -> None:
    constraints = ROOT / "constraints.txt"
    inputs = [ROOT / "pyproject.toml", constraints]
    with_dev = ["-c", str(constraints), "-e.[dev]"]
    # A venv set up for tests (with the dev extras) serves as it is.
    python = _project_python()
    if not dev:
        also_fine = [_digest(inputs, with_dev, python[1])]
        _ensure(VENV, inputs, ["-c", str(constraints), "-e."], also_fine=also_fine, python=python)
        return
    mcp1 = ROOT / "tests" / "contract" / "mcp1-requirements.txt"
    steps: list[Callable[[], None]] = [
        lambda: _ensure(VENV, inputs, with_dev, python=python),
        lambda: _ensure(VENV_MCP1, [mcp1], ["-r", str(mcp1)]),
        *(
            partial(_ensure, ROOT / f".venv-client-{r.stem}", [r], ["-r", str(r)])
            for r in sorted(CLIENTS.glob("*.txt"))
        ),
        _ensure_inspector,
        _ensure_debian_packages,
    ]
    # The environments are independent and their installs wait on downloads and disk more than on the
    # cores: side by side, a clean clone's setup takes about as long as its largest one (.venv).
    with ThreadPoolExecutor(max_workers=len(steps)) as pool:
        for future in [pool.submit(step) for step in steps]:
            future.result()


def _ensure_inspector() -> None:
    """Best effort: without npm (or the registry) the Inspector test skips and says why."""
    stamp = INSPECTOR / ".triptych-stamp"
    wanted = " ".join(INSPECTOR_PACKAGES)
    if stamp.exists() and stamp.read_text() == wanted:
        return
    npm = shutil.which("npm")
    if npm is None:
        print("tasks.py: npm not found; the MCP Inspector test will be skipped", file=sys.stderr)
        return
    INSPECTOR.mkdir(exist_ok=True)
    command = [npm, "install", "--prefix", str(INSPECTOR), "--no-audit", "--no-fund", "--silent"]
    try:
        _run(*command, *INSPECTOR_PACKAGES)
    except subprocess.CalledProcessError:
        print("tasks.py: installing the MCP Inspector failed; its test will be skipped", file=sys.stderr)
        return
    stamp.write_text(wanted)


def _ensure_debian_packages() -> None:
    # One after the other: apt holds a lock.
    _ensure_chromium()
    _ensure_old_clickhouse()


def _ensure_chromium() -> None:
    """Best effort: Debian's chromium for the app-page tests (tests/browser.py), which skip without it."""
    _ensure_debian_package("chromium", CHROMIUM, "the browser tests")


def _ensure_old_clickhouse() -> None:
    """Best effort: Debian's clickhouse-server (18.16, too old for Metergraph) for the test that an old
    server is refused naming its version (tests/metergraph/test_clickhouse_version.py). Installed, it is
    not started: the test runs its own on 127.0.0.1 (apt's policy here denies service starts)."""
    _ensure_debian_package("clickhouse-server", OLD_CLICKHOUSE, "the old-ClickHouse test")


def _ensure_debian_package(package: str, path: str, tests: str) -> None:
    if Path(path).exists():
        return
    apt = shutil.which("apt-get")
    if apt is None or not hasattr(os, "geteuid") or os.geteuid() != 0:
        print(f"tasks.py: {path} missing and apt-get unusable here; {tests} will be skipped", file=sys.stderr)
        return
    # No service start from a package's install script (a clickhouse-server on ports 8123 and 9000).
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive", "RUNLEVEL": "1"}
    try:
        _run(apt, "-qq", "update", env=env)
        _run(apt, "install", "-y", "-qq", "--no-install-recommends", package, env=env)
    except subprocess.CalledProcessError:
        print(f"tasks.py: installing {package} failed; {tests} will be skipped", file=sys.stderr)


def serve(args: list[str]) -> int:
    setup(dev=False)
    os.execv(_bin(VENV, "triptych"), [str(_bin(VENV, "triptych")), "serve", *args])
    return 0  # not reached


def _ensure_postgres_user() -> None:
    """PostgreSQL refuses to run as root: the server-mode tests run it as a ``postgres`` system user."""
    if os.name != "posix" or os.geteuid() != 0:
        return
    import pwd

    try:
        pwd.getpwnam("postgres")
    except KeyError:
        _run("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "postgres")


def test(args: list[str]) -> int:
    setup(dev=True)
    _ensure_postgres_user()
    python = _bin(VENV, "python")
    _run(python, "-m", "ruff", "check", "src", "tests", "bench", "tasks.py")
    _run(python, "-m", "ruff", "format", "--check", "src", "tests", "bench", "tasks.py")
    # Every `triptych serve` the tests start imports the whole source tree: compiled once here, it is read
    # from __pycache__ even where PYTHONDONTWRITEBYTECODE keeps Python from writing it (0.4 s of CPU per
    # start, times about 150 starts).
    _run(python, "-m", "compileall", "-q", "src")
    # mypy (half a minute of one core from a clean clone) checks while the tests run; its verdict counts
    # as much as theirs.
    print(f"+ {python} -m mypy  (beside the tests)", flush=True)
    mypy = subprocess.Popen(
        [str(python), "-m", "mypy"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    # The whole suite reports coverage and fails below the floor (pyproject.toml, fail_under); a run of
    # some tests (a path or -k) does not measure, since a part cannot meet the whole's floor.
    some = "-k" in args or any((ROOT / a.split("::")[0]).exists() for a in args if not a.startswith("-"))
    coverage = [] if some else ["--cov", "--cov-report=term:skip-covered"]
    # Workers for the whole suite only: each costs a collection and session servers of its own (about 40 s
    # of CPU), which a part of the suite does not earn back (docs/decisions/0150).
    workers = [] if some else _workers(args)
    tests = subprocess.run([str(python), "-m", "pytest", *coverage, *workers, *args], cwd=ROOT).returncode
    checked, _ = mypy.communicate()
    print(checked, end="", flush=True)
    if mypy.returncode != 0:
        print("mypy failed (above): fix the types before this lands", flush=True)
    return tests or mypy.returncode


def _workers(args: list[str]) -> list[str]:
    """pytest-xdist's options: one worker per core, at most 4 (``TRIPTYCH_TEST_WORKERS`` overrides; 1 runs
    in this process), unless the arguments choose. A whole file goes to one worker (``loadfile``), so a
    module's server starts once, as in a serial run; each worker has its own session servers."""
    chosen = ("-n", "--numprocesses", "--dist", "-pno:xdist", "no:xdist")
    if any(a.startswith(chosen) for a in args):
        return []
    configured = os.environ.get("TRIPTYCH_TEST_WORKERS")
    workers = int(configured) if configured else min(os.cpu_count() or 1, 4)
    # Files in the order tests/file_times.py gives (the longest first), not xdist's count of tests per file.
    loadfile = ["--numprocesses", str(workers), "--dist", "loadfile", "--no-loadscope-reorder"]
    return loadfile if workers > 1 else []


def bench(args: list[str]) -> int:
    setup(dev=True)
    scripts = {
        "scifact": "bench/scifact.py",
        "latency": "bench/latency_100k.py",
        "locomo": "bench/locomo.py",
        "contradictions": "bench/contradictions.py",
        "metergraph": "bench/metergraph_bench.py",
        "metergraph-ingest-phases": "bench/metergraph_ingest_phases.py",
        "metergraph-engines": "bench/metergraph_engines.py",
        "metergraph-ch-phases": "bench/metergraph_ch_phases.py",
        "metergraph-ch-views": "bench/metergraph_ch_views.py",
        "metergraph-classify": "bench/metergraph_classify.py",
        "hadron-graph": "bench/hadron_graph.py",
        "hadron-search": "bench/hadron_search.py",
        "hadron-abstracts": "bench/hadron_abstracts.py",
        "sync-answers": "bench/sync_answers.py",
        "robustness": "bench/robustness.py",
        "engines": "bench/engines.py",
        "app-pages": "bench/app_pages.py",
    }
    if not args or args[0] not in scripts:
        sys.exit(f"usage: python3 tasks.py bench {{{'|'.join(scripts)}}} [options]")
    return subprocess.run([str(_bin(VENV, "python")), scripts[args[0]], *args[1:]], cwd=ROOT).returncode


def main() -> int:
    commands = {"serve": serve, "test": test, "bench": bench}
    if len(sys.argv) < 2 or sys.argv[1] not in commands:
        print(__doc__)
        return 2
    try:
        return commands[sys.argv[1]](sys.argv[2:])
    except subprocess.CalledProcessError as exc:
        step = " ".join(map(str, exc.cmd))
        print(f"tasks.py: step failed (exit {exc.returncode}): {step}", file=sys.stderr)
        return exc.returncode or 1


if __name__ == "__main__":
    raise SystemExit(main())
