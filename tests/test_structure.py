"""The import rules of docs/design.md, checked statically over src/groupwise: no two modules import
each other, directly or round a longer loop (imports inside functions and
importlib.import_module("groupwise....") calls included); nothing imports cli; algorithms
import nothing else of the project; the ground floor imports no engine or command."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "groupwise"


def _modules(root: Path) -> dict[str, Path]:
    out = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imported_names(path: Path, module: str) -> set[str]:
    """Every dotted name `module` imports anywhere in its file, relative imports resolved."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            names.add(node.args[0].value)
    return names


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """module -> the project modules it imports (an import of one of its own parent packages,
    which Python has already begun to run, is not an edge)."""
    modules = _modules(root)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        for name in _imported_names(path, module):
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != module and not module.startswith(name + "."):
                graph[module].add(name)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_cycle_finder_finds_direct_and_longer_loops() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"e"}, "e": {"d"}, "f": {"a"}}
    assert sorted(cycles(graph)) == [["a", "b", "c"], ["d", "e"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_import_graph_sees_imports_inside_functions(tmp_path: Path) -> None:
    root = tmp_path / "pkg"
    (root / "sub").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "sub" / "__init__.py").write_text("from . import b\n")
    (root / "a.py").write_text("def f():\n    from pkg.sub.b import g\n")
    (root / "sub" / "b.py").write_text(
        "import importlib\nfrom .. import a\nfrom pkg import sub\n"
        "def h():\n    importlib.import_module('pkg.c')\n"
    )
    (root / "c.py").write_text("")
    graph = import_graph(root)
    # b -> sub (its own package) is not an edge; sub -> b is
    assert graph == {
        "pkg": set(),
        "pkg.sub": {"pkg.sub.b"},
        "pkg.a": {"pkg.sub.b"},
        "pkg.sub.b": {"pkg.a", "pkg.c"},
        "pkg.c": set(),
    }
    assert cycles(graph) == [["pkg.a", "pkg.sub.b"]]


def test_no_import_cycles() -> None:
    loops = cycles(import_graph())
    assert not loops, "modules that import each other: " + "; ".join(" <-> ".join(c) for c in loops)


def test_nothing_imports_cli_and_algorithms_import_only_themselves() -> None:
    graph = import_graph()
    assert [
        m for m, deps in graph.items() if "groupwise.cli" in deps and m != "groupwise.__main__"
    ] == []
    for module in (m for m in graph if m.startswith("groupwise.algorithms")):
        # groupwise.options, the one way options are declared, imports nothing of the project
        assert graph["groupwise.options"] == set()
        outside = {
            d
            for d in graph[module]
            if not d.startswith("groupwise.algorithms") and d != "groupwise.options"
        }
        assert not outside, f"{module} imports {sorted(outside)}"


# The floors above the ground floor (docs/design.md "Layout (the rooms)"): engines, commands.
UPPER_FLOORS = (
    "groupwise.train",
    "groupwise.evaluation",
    "groupwise.analysis",
    "groupwise.integrations",
    "groupwise.report",
    "groupwise.sft",
    "groupwise.cli",
    "groupwise.__main__",
)


def _upper(module: str) -> bool:
    return any(module == f or module.startswith(f + ".") for f in UPPER_FLOORS)


def test_the_ground_floor_imports_no_engine_or_command() -> None:
    """models, completion_logprobs, rollout, rewards, data, figures, records, ... never reach up."""
    graph = import_graph()
    arrows = sorted(
        f"{module} -> {dep}"
        for module, deps in graph.items()
        if not _upper(module)
        for dep in deps
        if _upper(dep)
    )
    assert not arrows, "back-arrows from the ground floor: " + "; ".join(arrows)


BENCH = PACKAGE.parents[1] / "bench"
PEER = Path(__file__).parent / "peer"
TESTBED = PACKAGE.parents[1] / "testbed"


def bench_graph(root: Path = BENCH) -> dict[str, set[str]]:
    """module of `root` (bench/ or tests/peer/) -> the modules of `root` it imports (they import
    each other by bare name, with their folder on sys.path), imports inside functions included."""
    modules = {path.stem for path in root.glob("*.py")}
    graph: dict[str, set[str]] = {}
    for path in root.glob("*.py"):
        names = _imported_names(path, path.stem)
        graph[path.stem] = {n.split(".")[0] for n in names} & modules - {path.stem}
    return graph


def testbed_graph() -> dict[str, set[str]]:
    """testbed module -> the testbed modules it imports (relative imports inside the package)."""
    modules = {path.stem for path in TESTBED.glob("*.py")} - {"__init__"}
    graph: dict[str, set[str]] = {}
    for name in modules:
        names = _imported_names(TESTBED / f"{name}.py", f"testbed.{name}")
        graph[name] = {n.split(".")[1] for n in names if n.startswith("testbed.")} - {name}
    return graph


def test_bench_and_the_testbed_have_no_import_cycles_and_the_plans_are_leaves() -> None:
    for graph in (bench_graph(), bench_graph(PEER), testbed_graph()):
        loops = cycles(graph)
        assert not loops, "modules that import each other: " + "; ".join(
            " <-> ".join(c) for c in loops
        )
    graph = testbed_graph()
    assert graph["plan"] == set() and graph["stats"] == set()
    assert "learning" not in graph["report"]
    assert not any("learning" in p.stem for p in BENCH.glob("*.py")), "the testbed is testbed/"
    assert not any("suite" in p.stem for p in BENCH.glob("*.py")), "peer suites are tests/peer/"


def test_bench_and_the_package_import_nothing_of_the_tests() -> None:
    # what a benchmark needs from a test helper belongs in the package (e.g. the local vLLM
    # server: groupwise.rollout.vllm_server), so that bench/ runs without tests/ on the path
    test_modules = {path.stem for path in Path(__file__).parent.glob("*.py")}
    found = []
    for path in [*PACKAGE.rglob("*.py"), *BENCH.glob("*.py"), *TESTBED.glob("*.py")]:
        names = _imported_names(path, path.stem)
        found += [f"{path.name} imports {name}" for name in names if name in test_modules]
    assert not found, "; ".join(found)


def test_no_function_of_the_engines_is_longer_than_50_lines() -> None:
    # the training step and the TRL adapter are read top to bottom: small functions
    long = []
    for folder in ("train", "integrations"):
        for path in sorted((PACKAGE / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    lines = node.end_lineno - node.lineno + 1
                    if lines > 50:
                        long.append(
                            f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name} ({lines} lines)"
                        )
    assert not long, "functions over 50 lines: " + "; ".join(long)
