"""The warm stage runner's protocol: a forked child per request, its output, status and pid."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from outoforder.stages import runner

# a stand-in for the stages' command line: what the child sees, and the status it is told to end with
FAKE_MAIN = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from outoforder.stages import runner

    def main(argv):
        if argv[0] == "sleep":
            time.sleep(60)
        if argv[0] == "raise":
            raise ValueError("a bug in the stage")
        print("argv", *argv)
        print("env", os.environ.get("OOO_PROBE"), "others", len(os.environ))
        print("cwd", os.getcwd())
        print("to stderr", file=sys.stderr)
        return int(argv[-1])

    runner.serve(Path(sys.argv[1]), main=main)
    """
)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "runner.sock"
    proc = subprocess.Popen([sys.executable, "-c", FAKE_MAIN, str(path)], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        assert "ready" in proc.stdout.readline().decode()
        yield path
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_request_runs_in_a_child_with_the_requesters_env_and_folder_and_returns_its_status(
    served: Path, tmp_path: Path
) -> None:
    lines: list[str] = []
    pids: list[int] = []
    code = runner.run(served, ["a", "b", "3"], {"OOO_PROBE": "x"}, lines.append, pids.append, str(tmp_path))
    assert code == 3
    assert lines[:3] == ["argv a b 3", "env x others 1", f"cwd {tmp_path}"]
    assert "to stderr" in lines  # both streams reach the requester's pipe
    assert len(pids) == 1 and pids[0] != os.getpid()
    assert runner.run(served, ["0"], {}, lines.append) == 0  # the runner serves the next one


def test_a_stage_that_raises_exits_1_with_its_traceback(served: Path) -> None:
    lines: list[str] = []
    assert runner.run(served, ["raise"], {}, lines.append) == 1
    assert any("ValueError: a bug in the stage" in line for line in lines)


def test_a_killed_stage_is_an_error_not_a_status(served: Path) -> None:
    def kill(pid: int) -> None:
        time.sleep(0.2)
        os.killpg(pid, signal.SIGTERM)  # the child leads a process group of its own

    with pytest.raises(RuntimeError, match="without a status"):
        runner.run(served, ["sleep"], {}, lambda _: None, kill)


def test_a_malformed_request_is_refused_and_the_runner_stays_up(served: Path) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(str(served))
        conn.sendall(b'{"argv": ["1"]}\n')  # no output pipe attached
        assert b"error" in conn.makefile("rb").readline()
    assert runner.run(served, ["0"], {}, lambda _: None) == 0


def test_the_socket_is_only_for_its_owner(served: Path) -> None:
    assert served.stat().st_mode & 0o077 == 0


def test_no_runner_on_the_socket_is_told_apart_from_a_failed_stage(tmp_path: Path) -> None:
    gone = tmp_path / "gone.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(str(gone))  # a socket file nobody listens on, as a stopped runner leaves it
    with pytest.raises(runner.RunnerUnavailable):
        runner.run(gone, ["0"], {}, lambda _: None)


# after the runner's imports, a child that collects garbage: its private memory, with the imports
# frozen (as the runner leaves them) and, for scale, unfrozen
PRIVATE_AFTER_COLLECTING = textwrap.dedent(
    """
    import gc, os
    from outoforder.stages import runner

    def child_private_mb():
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            gc.collect()
            rollup = open("/proc/self/smaps_rollup").read().split("Private_Dirty:")[1]
            os.write(w, rollup.split()[0].encode())
            os._exit(0)
        os.close(w)
        kb = int(os.read(r, 64))
        os.waitpid(pid, 0)
        return kb / 1024

    runner.warm_up()
    frozen = child_private_mb()
    gc.unfreeze()
    print(frozen, child_private_mb())
    """
)


@pytest.mark.skipif(not Path("/proc/self/smaps_rollup").exists(), reason="Linux's /proc measures it")
def test_a_child_collecting_garbage_copies_none_of_the_runners_imports() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PRIVATE_AFTER_COLLECTING],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    frozen, unfrozen = map(float, done.stdout.split()[-2:])
    assert unfrozen > 40  # the imports are that large: the comparison means something
    assert frozen < unfrozen / 4, (frozen, unfrozen)
