"""A warm process that runs stages for Airflow's tasks: the imports done once, a fork per stage.

A stage started as a new Python process spends about 0.7 CPU-seconds importing the Spark Connect
client, pandas, pyarrow and the project, and a validation about four more importing Great
Expectations: on a live stream, where every DAG runs its stage, check and report every minute,
that is a fifth of a two-core machine before any work. The runner imports all of it once, then
serves requests on a Unix socket that only its owner can reach: for each one it forks a child
that runs ``python -m outoforder.stages <argv>`` (:func:`outoforder.stages.cli.main`) in the
requester's environment and working folder, writing to the requester's own pipe. The fork costs
milliseconds and the imported pages are shared.

The protocol: the client sends one JSON line ``{"argv": [...], "env": {...}, "cwd": "..."}`` with
the write end of its output pipe attached (``SCM_RIGHTS``); the runner answers with the child's
pid (``{"pid": N}``, so that the client can stop it) and, when it ends, its exit status
(``{"exit": N}``). ``python -m outoforder.stages.runner serve --socket PATH`` runs it (started
with the Spark Connect server by ``infra/spark-connect.sh``); :func:`run` is the client.

The parent never opens a Spark session, a gRPC channel or a thread, so that a fork of it is safe.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import logging
import os
import resource
import signal
import socket
import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

# what the stages import: the Spark Connect client, the data libraries, Great Expectations (the
# checks), matplotlib (the report's plots) and the stage modules themselves
WARM_IMPORTS = (
    "numpy",
    "pandas",
    "pyarrow",
    "pyarrow.parquet",
    "pyspark.sql.connect.session",
    "pyspark.sql.functions",
    "matplotlib.pyplot",
    "great_expectations",
    "outoforder.stages.cli",
    "outoforder.stages.join.stream",
    "outoforder.stages.join.validate",
    "outoforder.stages.aggregate.stream",
    "outoforder.stages.aggregate.validate",
    "outoforder.stages.topk.stream",
    "outoforder.stages.topk.validate",
    "outoforder.stages.ingest.kafka",
    "outoforder.quality.report",
    "outoforder.quality.checkpoints",
)
MAX_MESSAGE = 1 << 20


class RunnerUnavailable(OSError):
    """No runner answers on the socket (not started, or being restarted): nothing was run."""


def warm_up() -> None:
    """Import what every stage needs (after which the process must stay single-threaded)."""
    import importlib

    os.environ.setdefault("MPLBACKEND", "Agg")
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")  # no background sender to fork with
    for name in WARM_IMPORTS:
        importlib.import_module(name)
    others = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    if others:
        log.warning("[runner] threads after the imports (a fork copies none of them): %s", others)
    # The imported objects out of the collector's reach: a child's collections would otherwise
    # write to every tracked object's header and so copy every page of the imports (about 80 MB of
    # private memory per child instead of about 7); a live minute runs several children at once.
    gc.collect()
    gc.freeze()


def _read_line(conn: socket.socket) -> tuple[bytes, list[int]]:
    """One newline-terminated message and the descriptors that came with it."""
    data, fds = b"", []
    while not data.endswith(b"\n"):
        chunk, got, _, _ = socket.recv_fds(conn, 65536, 4)
        if not chunk:
            break
        data += chunk
        fds += got
        if len(data) > MAX_MESSAGE:
            msg = "request too long"
            raise ValueError(msg)
    return data, fds


def _child(
    conn: socket.socket, request: Mapping[str, Any], out_fd: int, main: Callable[[list[str]], int]
) -> None:
    """In the forked child: become the requester's stage process, run it, report, exit."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.setsid()  # a group of its own: the client's stop ends the stage and whatever it started
    os.dup2(out_fd, 1)
    os.dup2(out_fd, 2)
    os.close(out_fd)
    sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
    sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)
    os.environ.clear()
    os.environ.update({str(k): str(v) for k, v in dict(request.get("env") or {}).items()})
    if request.get("cwd"):
        os.chdir(str(request["cwd"]))
    code = 1
    try:
        code = int(main([str(a) for a in request["argv"]]))
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # the child's own report of a bug, as a process of its own would print it
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        # what it touched at most (with the pages it shares with the runner): the figure to look
        # at when the server's memory grows
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
        print(f"[runner] stage process {os.getpid()} exits {code}; peak resident memory {peak_mb} MB")
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            conn.sendall(json.dumps({"exit": code}).encode() + b"\n")
        finally:
            os._exit(code)


def serve(path: Path, main: Callable[[list[str]], int] | None = None) -> None:
    """Accept requests on the Unix socket at ``path`` until terminated; one forked child each.

    ``main`` runs a request's argv in the child: the stages' command line (after :func:`warm_up`)
    unless given.
    """
    if main is None:
        from outoforder.stages.cli import main as stages_main

        warm_up()
        main = stages_main
    if path.exists():
        path.unlink()
    old = os.umask(0o077)
    try:
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(str(path))
    finally:
        os.umask(old)
    server.listen(16)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    print(f"[runner] ready on {path} (pid {os.getpid()})", flush=True)
    while True:
        conn, _ = server.accept()
        try:
            data, fds = _read_line(conn)
            request = json.loads(data)
            if len(fds) != 1 or "argv" not in request:
                msg = "a request is one JSON line with argv, and the output pipe attached"
                raise ValueError(msg)
        except (OSError, ValueError) as e:
            conn.sendall(json.dumps({"error": str(e)}).encode() + b"\n")
            conn.close()
            continue
        pid = os.fork()
        if pid == 0:
            server.close()
            _child(conn, request, fds[0], main)
        os.close(fds[0])
        with contextlib.suppress(OSError):  # the client went away; the child finds out when it reports
            conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
        conn.close()


def run(
    path: str | os.PathLike[str],
    argv: list[str],
    env: Mapping[str, str],
    on_line: Callable[[str], None],
    on_pid: Callable[[int], None] | None = None,
    cwd: str | None = None,
) -> int:
    """Run a stage through the runner at ``path``: its output line by line to ``on_line``; its status.

    Standard library only (the Airflow venv calls it).
    """
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(str(path))
    except OSError as e:
        conn.close()
        msg = f"no stage runner answers at {path}: {e}"
        raise RunnerUnavailable(msg) from e
    read_end, write_end = os.pipe()
    try:
        request = {"argv": argv, "env": dict(env), "cwd": cwd or os.getcwd()}
        socket.send_fds(conn, [json.dumps(request).encode() + b"\n"], [write_end])
    except BaseException:
        os.close(read_end)
        raise
    finally:
        os.close(write_end)
    replies = conn.makefile("r", encoding="utf-8")
    first = json.loads(replies.readline() or '{"error": "the runner closed the connection"}')
    if "pid" not in first:
        os.close(read_end)
        conn.close()
        msg = f"the stage runner refused the request: {first.get('error')}"
        raise RuntimeError(msg)
    if on_pid is not None:
        on_pid(int(first["pid"]))
    with os.fdopen(read_end, "r", encoding="utf-8", errors="replace") as out:
        for line in out:
            on_line(line.rstrip("\n"))
    last = replies.readline()
    conn.close()
    if not last:
        msg = "the stage's process ended without a status (killed?)"
        raise RuntimeError(msg)
    return int(json.loads(last)["exit"])


def main(argv: list[str] | None = None) -> int:
    """``serve --socket PATH``."""
    p = argparse.ArgumentParser(prog="python -m outoforder.stages.runner")
    p.add_argument("what", choices=["serve"])
    p.add_argument("--socket", type=Path, required=True)
    args = p.parse_args(argv)
    serve(args.socket)
    return 0


if __name__ == "__main__":
    sys.exit(main())
