"""What a `triptych` process costs before it does anything (issue 29 item 7, docs/decisions/0310): the CPU
(user + sys, the machine being shared) of `triptych --help`, `triptych config`, one admin command
(`triptych hadron user create`, what the tests run most) and `triptych serve` up to its first `/health`
200, each as the tests run it (the venv's `triptych` script, a fresh data directory per arm), with
coverage off and on (``COVERAGE_PROCESS_START`` on this tree's pyproject.toml, as a covered test run
starts its servers; sys.monitoring on Python 3.12).

Arms, alternating within each round of one run: ``branch`` (this tree's src) and, with ``--main-src``,
``main`` (the same commands on the code at that path, put first on PYTHONPATH; make one with
``git worktree add --detach /tmp/triptych-bench/main main``). Both trees are byte-compiled first, as
``tasks.py test`` does, so neither arm pays for compiling.

    flock /tmp/triptych-bench.lock nice -n 5 .venv/bin/python bench/cli_start.py
        [--rounds 5] [--main-src /tmp/triptych-bench/main/src] [--commands help,config,admin,serve]

Prints, per command, coverage setting and arm: the median CPU seconds over the rounds (min-max), the
serve's wall time to health, and the ratio of each arm to main.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRIPTYCH = str(Path(sys.executable).parent / "triptych")
COMMANDS = ("help", "config", "admin", "serve")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def environment(src: Path, data: Path, covered: bool, scratch: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COVERAGE_")}
    env.update(PYTHONPATH=str(src), TRIPTYCH_DATA_DIR=str(data), PYTHONDONTWRITEBYTECODE="1")
    if covered:
        env.update(
            COVERAGE_PROCESS_START=str(ROOT / "pyproject.toml"), COVERAGE_FILE=str(scratch / ".coverage")
        )
    return env


def run_once(argv: list[str], env: dict[str, str]) -> float:
    """CPU seconds (user + sys) of one command run to its end."""
    process = subprocess.Popen([TRIPTYCH, *argv], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert process.stderr is not None
    err = process.stderr.read()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise RuntimeError(f"triptych {' '.join(argv)} exited {process.returncode}: {err.decode()[-2000:]}")
    return usage.ru_utime + usage.ru_stime


def serve_once(env: dict[str, str], log: Path) -> tuple[float, float]:
    """CPU seconds of `triptych serve` up to its first /health 200 (from /proc, the process's every thread),
    and the wall time to it."""
    port = free_port()
    started = time.monotonic()
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [TRIPTYCH, "serve", "--port", str(port)], env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"serve exited early: {log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                time.sleep(0.05)
        wall = time.monotonic() - started
        fields = Path(f"/proc/{process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return cpu, wall


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--main-src", type=Path, help="a second arm: the same commands on the code at this src"
    )
    parser.add_argument("--commands", default=",".join(COMMANDS), help=f"of {', '.join(COMMANDS)}")
    args = parser.parse_args()
    commands = [c for c in args.commands.split(",") if c]
    arms = {"branch": ROOT / "src"}
    if args.main_src:
        arms["main"] = args.main_src.resolve()
    for src in arms.values():  # as tasks.py test does: no arm pays for compiling
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(src)], check=True)
    cpu: dict[tuple[str, bool, str], list[float]] = {}
    walls: dict[tuple[bool, str], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="cli-start-", dir=os.environ.get("TMPDIR")) as tmp:
        scratch = Path(tmp)
        for n in range(args.rounds):
            for covered in (False, True):
                # Alternate which arm goes first, round by round: neither always meets a warmer cache.
                order = list(arms.items()) if n % 2 == 0 else list(reversed(arms.items()))
                for arm, src in order:
                    data = scratch / f"{arm}-{n}-{int(covered)}"
                    env = environment(src, data, covered, scratch)
                    for command in commands:
                        key = (command, covered, arm)
                        if command == "help":
                            seconds = run_once(["--help"], env)
                        elif command == "config":
                            seconds = run_once(["config"], env)
                        elif command == "admin":
                            seconds = run_once(["hadron", "user", "create", f"user{n}"], env)
                        else:
                            seconds, wall = serve_once(env, scratch / f"serve-{arm}-{n}.log")
                            walls.setdefault((covered, arm), []).append(wall)
                        cpu.setdefault(key, []).append(seconds)
            print(f"round {n + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    print(
        f"CPU seconds (user+sys), median of {args.rounds} rounds (min-max); Python {sys.version.split()[0]}"
    )
    for command in commands:
        for covered in (False, True):
            base = statistics.median(cpu[(command, covered, "main")]) if "main" in arms else None
            for arm in arms:
                values = cpu[(command, covered, arm)]
                median = statistics.median(values)
                ratio = f"  {median / base:.2f}x main" if base else ""
                wall = ""
                if command == "serve":
                    wall = f"  wall to health {statistics.median(walls[(covered, arm)]):.2f} s"
                print(
                    f"  {command:7s} coverage {'on ' if covered else 'off'} {arm:7s}"
                    f" {median:6.3f} s ({min(values):.3f}-{max(values):.3f}){ratio}{wall}"
                )


if __name__ == "__main__":
    main()
