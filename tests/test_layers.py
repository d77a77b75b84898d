"""The package's layering rules (DESIGN.md, "layers"), checked on the source text.

* Only ``tfxla_cluster/tf_compat.py`` touches TF internals; importing it (and the CLI's ``--help``)
  does not import TensorFlow.
* The import graph — every ``import`` statement, including those inside functions (a lazy import is a
  dependency all the same); not those under ``if TYPE_CHECKING:`` (type names only, never executed) —
  has no cycle, and each layer imports only the layers ``LAYERS`` lets it.

``python tests/test_layers.py`` prints the cycles and the violations.
"""
from __future__ import annotations

import ast
import os
import pathlib
import subprocess
import sys

import networkx as nx

PKG = pathlib.Path(__file__).resolve().parent.parent / "tfxla_cluster"
ROOT = "tfxla_cluster"

# The one layer table: layer -> (its modules, by dotted prefix below tfxla_cluster; the layers it may
# import). A module belongs to the layer of its longest matching prefix; "" is the package itself,
# whose __init__ resolves names lazily and imports nothing.
LAYERS: dict[str, tuple[tuple[str, ...], frozenset[str]]] = {
    "base": (("", "errors", "flags", "_gc", "_lazy", "_quiet", "progress", "compile_profile", "process_state", "mxcsr", "cpu_topology"), frozenset()),
    "hlo": (("hlo",), frozenset({"base"})),
    "tf_compat": (("tf_compat",), frozenset({"base"})),
    "graph": (("graph",), frozenset({"base", "tf_compat"})),
    "tfops": (("tfops",), frozenset({"base", "tf_compat", "graph"})),
    "jit": (("jit",), frozenset({"base", "tf_compat", "graph", "tfops"})),
    "tf2hlo": (("tf2hlo",), frozenset({"base", "tf_compat", "graph", "tfops", "hlo"})),
    "passes": (("passes",), frozenset({"base", "hlo"})),
    "codegen": (("codegen",), frozenset({"base", "hlo", "passes"})),
    "runtime": (("runtime",), frozenset({"base", "hlo", "tf_compat", "graph", "tfops", "jit", "tf2hlo",
                                         "passes", "codegen"})),
    "top": (("cli", "cli_common", "__main__", "report", "viz", "tools", "bench", "bench_layers", "demo", "hostinfo"),
            frozenset({"base", "hlo", "tf_compat", "graph", "tfops", "jit", "tf2hlo", "passes", "codegen",
                       "runtime"})),
}

# Imports that break the rules on purpose (none today). Nothing may be added without a comment saying why.
ALLOWED_CYCLES: list[frozenset[str]] = [
]
ALLOWED_UPWARD: set[tuple[str, str]] = set()


def _module_files() -> dict[str, pathlib.Path]:
    out = {}
    for path in PKG.rglob("*.py"):
        parts = path.relative_to(PKG).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join((ROOT, *parts))] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement, at any depth, except under ``if TYPE_CHECKING:``."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def import_graph() -> nx.DiGraph:
    """Module -> module edges inside the package (short names, without the ``tfxla_cluster.`` prefix;
    the package itself is ``""``). Importing ``a.b.c`` also runs ``a.b``'s ``__init__``; that
    implicit edge to a parent package is not counted."""
    files = _module_files()
    graph = nx.DiGraph()
    for module, path in files.items():
        graph.add_node(_short(module))
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                if node.level:
                    base = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                # "from pkg import mod" imports the submodule; "from mod import name" the module.
                targets = [f"{source}.{a.name}" for a in node.names if f"{source}.{a.name}" in files] or [source]
            for target in targets:
                if target in files and target != module and not module.startswith(target + "."):
                    graph.add_edge(_short(module), _short(target))
    return graph


def _short(module: str) -> str:
    return module[len(ROOT) + 1:] if module != ROOT else ""


def layer_of(module: str) -> str:
    best, best_len = None, -1
    for layer, (prefixes, _) in LAYERS.items():
        for prefix in prefixes:
            matches = module == prefix or (prefix and module.startswith(prefix + "."))
            if matches and len(prefix) > best_len:
                best, best_len = layer, len(prefix)
    if best is None:
        raise AssertionError(f"module {ROOT}.{module} is in no layer of LAYERS")
    return best


def cycles(graph: nx.DiGraph) -> list[frozenset[str]]:
    return [frozenset(c) for c in nx.strongly_connected_components(graph) if len(c) > 1]


def violations(graph: nx.DiGraph) -> list[tuple[str, str]]:
    bad = []
    for a, b in graph.edges():
        la, lb = layer_of(a), layer_of(b)
        if la != lb and lb not in LAYERS[la][1] and (a, b) not in ALLOWED_UPWARD:
            bad.append((a, b))
    return sorted(bad)


# ----------------------------------------------------------------------------------------------- tests
def test_tf_internals_only_in_tf_compat():
    offenders = sorted(f"{path.relative_to(PKG)}:{i}" for path in PKG.rglob("*.py") if path.name != "tf_compat.py"
                       or path.parent != PKG
                       for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if "tensorflow.python" in line)
    assert not offenders, f"private TF imports outside tf_compat.py: {offenders}"


def test_tf_compat_and_cli_help_do_not_import_tensorflow():
    code = ("import contextlib, io, runpy, sys\n"
            "import tfxla_cluster.tf_compat, tfxla_cluster.errors, tfxla_cluster.hostinfo\n"
            "sys.argv = ['tfxla-cluster', '--help']\n"
            "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
            "    runpy.run_module('tfxla_cluster', run_name='__main__')\n"
            "print('tensorflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=PKG.parent, env={**os.environ, "PYTHONPATH": str(PKG.parent)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_every_module_has_a_layer():
    for module in import_graph().nodes:
        layer_of(module)


def test_no_import_cycles():
    found = set(cycles(import_graph()))
    unexpected = [sorted(c) for c in found if c not in ALLOWED_CYCLES]
    assert not unexpected, f"import cycles: {unexpected}"


def test_allow_lists_are_not_stale():
    graph = import_graph()
    found = set(cycles(graph))
    stale = [sorted(c) for c in ALLOWED_CYCLES if c not in found]
    assert not stale, f"these cycles are gone: remove them from ALLOWED_CYCLES: {stale}"
    gone = sorted(e for e in ALLOWED_UPWARD if not graph.has_edge(*e))
    assert not gone, f"these imports are gone: remove them from ALLOWED_UPWARD: {gone}"


def test_layers_import_only_downward():
    bad = violations(import_graph())
    assert not bad, "imports against the layer table: " + ", ".join(
        f"{a} ({layer_of(a)}) -> {b} ({layer_of(b)})" for a, b in bad)


def test_the_table_rejects_upward_and_sideways_imports():
    g = nx.DiGraph([("tf2hlo.lower", "jit.xla_kernels"), ("graph.function", "runtime.plugin"),
                    ("passes.fusion", "tf2hlo.lower"), ("jit.explain", "tfops.reasons")])
    assert violations(g) == [("graph.function", "runtime.plugin"), ("passes.fusion", "tf2hlo.lower"),
                             ("tf2hlo.lower", "jit.xla_kernels")]


def test_the_checker_sees_lazy_imports_and_skips_type_checking_ones():
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import x\n"
                     "def f():\n    import y\n")
    assert [n.names[0].name for n in _imports(tree)] == ["TYPE_CHECKING", "y"]


if __name__ == "__main__":
    g = import_graph()
    for c in cycles(g):
        print("cycle:", sorted(c), "(allowed)" if c in ALLOWED_CYCLES else "")
    for a, b in violations(g):
        print(f"upward: {a} ({layer_of(a)}) -> {b} ({layer_of(b)})")
