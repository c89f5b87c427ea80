"""The pure algorithm layer imports nothing from Spark, Delta, Airflow, GX or IO."""

import ast
import shutil
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "pipelines" / "outoforder"
FORBIDDEN_IN_CORE = (
    "pyspark",
    "delta",
    "deltalake",
    "airflow",
    "great_expectations",
    "pandas",
    "pyarrow",
    "outoforder.spark",
    "outoforder.io",
    "outoforder.stages",
    "outoforder.quality",
    "outoforder.sources",
)


def forbidden_imports(source: str, forbidden=FORBIDDEN_IN_CORE) -> list[str]:
    """Every import (top level or inside functions) of a forbidden module."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        found += [n for n in names if any(n == f or n.startswith(f + ".") for f in forbidden)]
    return found


def test_the_checker_catches_lazy_and_top_level_imports():
    src = "import numpy\nfrom pyspark.sql import DataFrame\ndef f():\n    import airflow.sdk\n"
    assert forbidden_imports(src) == ["pyspark.sql", "airflow.sdk"]


def test_core_modules_import_only_stdlib_numpy_and_core():
    offenders = {}
    for path in sorted((PACKAGE / "core").rglob("*.py")):
        bad = forbidden_imports(path.read_text())
        if bad:
            offenders[str(path.relative_to(PACKAGE))] = bad
    assert offenders == {}


def test_import_linter_contracts_are_kept():
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert exe, "import-linter is part of the Spark venv (infra/requirements/spark.in)"
    run = subprocess.run([exe], cwd=PACKAGE.parents[1], capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stdout[-3000:]
    assert "0 broken" in run.stdout


def test_the_front_door_exports_what_it_lists_and_imports_nothing_heavy():
    import outoforder

    assert sorted(outoforder._EXPORTS) == sorted(outoforder.__all__)
    probe = (
        "import sys, outoforder; print(sorted({m.split('.')[0] for m in sys.modules} & {'numpy', 'pyspark'}))"
    )
    light = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert light.stdout.strip() == "[]"  # the names load on first use
    assert all(getattr(outoforder, name) is not None for name in outoforder.__all__)


def test_job_declarations_and_the_cli_parser_import_nothing_heavy():
    # the DAG files import the job declarations when Airflow parses them; the CLI's --help is instant
    probe = (
        "import sys; from outoforder.stages.cli import build_parser; build_parser(); "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'numpy', 'pandas', 'pyspark', 'pyarrow'}))"
    )
    light = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert light.stdout.strip() == "[]"


# What Spark Connect does not offer: the JVM behind a classic session (py4j), the SparkContext,
# RDDs and accumulators. The stage code runs as a client of the shared server (DESIGN, "Stages and
# orchestration"), so none of it may appear where the stages' code lives.
CONNECT_LAYERS = ("stages", "io", "spark", "quality")
CLASSIC_ONLY_ATTRS = frozenset(
    {"sparkContext", "_jvm", "_jsc", "_jdf", "_jsparkSession", "_gateway", "rdd", "accumulator"}
    | {"parallelize"}
)
CLASSIC_ONLY_MODULES = ("py4j", "pyspark.accumulators", "pyspark.rdd", "pyspark.context", "delta.tables")


def classic_only(source: str) -> list[str]:
    """Attribute uses and imports of what only a classic session has."""
    found = forbidden_imports(source, CLASSIC_ONLY_MODULES)
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in CLASSIC_ONLY_ATTRS:
            found.append(node.attr)
    return found


def test_the_connect_checker_catches_the_jvm_the_context_and_rdds():
    src = (
        "from py4j.protocol import Py4JJavaError\nsc = spark.sparkContext\nx = df._jdf.schema()\n"
        "def f(df):\n    return df.rdd.zipWithIndex()\n"
    )
    assert classic_only(src) == ["py4j.protocol", "sparkContext", "_jdf", "rdd"]


def test_stage_code_uses_only_what_spark_connect_offers():
    offenders = {}
    for layer in CONNECT_LAYERS:
        for path in sorted((PACKAGE / layer).rglob("*.py")):
            bad = classic_only(path.read_text())
            if bad:
                offenders[str(path.relative_to(PACKAGE))] = bad
    assert offenders == {}


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the package's modules it imports, at the top or inside functions (not for typing only)."""
    modules = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        tree = ast.parse(path.read_text())
        typing_only = {
            id(n)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for n in ast.walk(node)
        }
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            else:
                continue
            graph[module] |= {n for n in names if n in modules and n != module}
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_the_circle_finder_finds_a_lazy_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert import_circles(graph) == [["a", "b", "c"]]


def test_no_module_imports_one_that_imports_it_back():
    # a lazy import inside a function counts: it hides a circle, it does not remove it
    assert import_circles(import_graph()) == []


def test_the_product_package_never_imports_the_benchmarks():
    offenders = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        bad = forbidden_imports(path.read_text(), forbidden=("benchmarks",))
        if bad:
            offenders[str(path.relative_to(PACKAGE))] = bad
    assert offenders == {}
