"""The shared Spark Connect server's settings: what ``infra/spark-connect.sh`` starts it with.

One long-lived Spark application serves every task of the pipeline (DESIGN: "Stages and
orchestration"): the project's Spark settings (:meth:`outoforder.config.Settings.spark_conf`:
Delta's jars and extensions, the lake's storage, the master), plus what a server needs of its own:
the loopback address and port it listens on, the shared secret a client must present, where
checkpoints go, and its UI (whose REST API the live benchmark reads). They are written as a
properties file that only the owner can read, never passed on a command line.

``python -m outoforder.spark.server properties --port P --dir D`` prints them.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from outoforder.config import Settings, load_settings

# an idle session (a client that died without releasing it) is dropped after this long
SESSION_TIMEOUT = "30min"
# A long-lived JVM: the optimising compiler pays back (the tests give their short JVMs the client
# one through JAVA_TOOL_OPTIONS, which these override). The heap gives back what a burst of work
# committed: without the free-ratio bounds a heap once grown to -Xmx stays committed for good, and
# the server's memory is its peak, not its need; G1's periodic collection (G1 is the JVM's choice
# on a machine of 2 CPUs and more; the flag is ignored by the others) lets an idle server shrink
# too. OOO_SPARK_CONNECT_JAVA_OPTIONS replaces them all.
JAVA_OPTIONS = (
    "-XX:TieredStopAtLevel=4 -XX:MinHeapFreeRatio=10 -XX:MaxHeapFreeRatio=30 -XX:G1PeriodicGCInterval=30000"
)


def server_conf(
    settings: Settings, port: int, state_dir: Path, ui_port: int, token: str, java_options: str = JAVA_OPTIONS
) -> dict[str, str]:
    """Every setting of the server: the project's, and its own (address, secret, checkpoints, UI, JVM)."""
    conf = settings.spark_conf(with_credentials=True)  # the file is its owner's alone (spark-connect.sh)
    conf |= {
        "spark.master": settings.spark.master,
        "spark.app.name": "outoforder-connect",
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
        "spark.connect.authenticate.token": token,
        "spark.connect.session.manager.defaultSessionTimeout": SESSION_TIMEOUT,
        "spark.checkpoint.dir": str(state_dir / "checkpoints"),
        "spark.local.dir": str(state_dir / "tmp"),
        # its UI (jobs, stages, the REST API under /api/v1) on loopback; the status store keeps
        # the jobs of the last quarter of an hour or so of a live run (it lives in the heap: the
        # SQL executions with their plans above all)
        "spark.ui.enabled": "true",
        "spark.ui.port": str(ui_port),
        "spark.ui.retainedJobs": "1000",
        "spark.ui.retainedStages": "2000",
        "spark.sql.ui.retainedExecutions": "500",
        # Every Spark Connect session's Python work gets a Python worker factory of its own (keyed
        # by the session's artifact id, whatever the isolation setting), and Spark 4.2 never stops
        # a factory's daemon: a few a minute on a live stream, until the machine runs out of
        # memory (within an hour at a tenth of the rate on 24 GB). Without the daemon and reuse,
        # a task's worker is a process that exits with it; a session paid a daemon's start anyway.
        "spark.python.use.daemon": "false",
        "spark.python.worker.reuse": "false",
        "spark.driver.extraJavaOptions": java_options,
    }
    return conf


def properties(conf: dict[str, str]) -> str:
    r"""``conf`` as a Spark properties file (``key value`` per line).

    >>> properties({"spark.a": "1", "spark.b": "x y"})
    'spark.a 1\nspark.b x y\n'
    """
    return "".join(f"{k} {v}\n" for k, v in conf.items())


def probe(remote: str) -> float:
    """Seconds for a new client session on ``remote`` to get an answer to ``SELECT 1``."""
    import time

    from pyspark.sql import SparkSession

    t0 = time.monotonic()
    spark = SparkSession.builder.remote(remote).create()
    try:
        spark.sql("SELECT 1").collect()
    finally:
        spark.stop()
    return time.monotonic() - t0


def main(argv: list[str] | None = None) -> int:
    """``properties``: print the server's (the token read from ``--token-file``); ``probe``: ask it."""
    p = argparse.ArgumentParser(prog="python -m outoforder.spark.server")
    sub = p.add_subparsers(dest="what", required=True)
    props = sub.add_parser("properties")
    props.add_argument("--port", type=int, required=True)
    props.add_argument("--ui-port", type=int, required=True)
    props.add_argument("--dir", type=Path, required=True, help="the server's state folder")
    props.add_argument("--token-file", type=Path, required=True)
    ask = sub.add_parser("probe", help="exit 0 once a client gets an answer (the token from the environment)")
    ask.add_argument("remote", help="sc://host:port")
    args = p.parse_args(argv)
    if args.what == "probe":
        print(f"answered in {probe(args.remote):.2f} s")
        return 0
    token = args.token_file.read_text().strip()
    java = os.environ.get("OOO_SPARK_CONNECT_JAVA_OPTIONS", JAVA_OPTIONS)
    sys.stdout.write(properties(server_conf(load_settings(), args.port, args.dir, args.ui_port, token, java)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
