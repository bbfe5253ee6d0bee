"""The dependency direction: powerflow and problems import privcvx, never the reverse."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PRIVCVX = Path(__file__).resolve().parents[1] / "privcvx"


def test_privcvx_source_never_imports_the_application_packages():
    offenders = []
    for path in PRIVCVX.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            offenders += [f"{path.name}: {name}" for name in names if name.split(".")[0] in ("powerflow", "problems")]
    assert offenders == []


def test_importing_privcvx_and_its_cli_loads_neither_package():
    code = ("import sys, privcvx, privcvx.cli, privcvx.study_file; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('powerflow', 'problems')))")
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert output.strip() == "[]"


def _imports(path: Path, module_level_only: bool = False, skip_functions: tuple[str, ...] = ()) -> list[str]:
    """Modules imported by a file: all of them, or only those imported when the module is loaded.

    Module level excludes imports inside functions and under ``if TYPE_CHECKING:``; ``skip_functions`` leaves out
    the imports inside the module-level functions and methods of those names.
    """
    tree = ast.parse(path.read_text())
    skipped = {id(inner) for node in ast.walk(tree)
               if (isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test))
               or (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in skip_functions)
               for inner in ast.walk(node)}
    nodes = [node for node in ast.walk(tree) if id(node) not in skipped]
    if module_level_only:
        nodes = [node for node in tree.body
                 if not (isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test))]
        nodes = [inner for node in nodes for inner in ast.walk(node)
                 if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    names = []
    for node in nodes:
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names += [node.module or ""] + [f"{node.module}.{alias.name}" for alias in node.names]
    return names


def test_algorithms_never_import_the_runtime():
    offenders = [f"{path.name}: {name}" for path in (PRIVCVX / "algorithms").rglob("*.py")
                 for name in _imports(path) if name.startswith("privcvx.runtime")]
    assert offenders == []


def test_problem_imports_neither_algorithms_nor_runtime_at_module_level():
    names = _imports(PRIVCVX / "problem.py", module_level_only=True)
    assert not [n for n in names if n.startswith(("privcvx.algorithms", "privcvx.runtime"))], names
    # The front door imports them inside solve(): that is the only arrow from problem to the runtime.
    assert any(n.startswith("privcvx.runtime") for n in _imports(PRIVCVX / "problem.py"))


def test_the_runtime_uses_algorithms_only_through_the_protocol():
    for path in (PRIVCVX / "runtime").rglob("*.py"):
        concrete = [n for n in _imports(path) if n.startswith("privcvx.algorithms.")
                    and not n.startswith("privcvx.algorithms.base")]
        assert concrete == [], path.name


def _import_cycles(module_level_only: bool) -> list[list[str]]:
    """The cycles of the import graph of privcvx, powerflow and problems (package facades, ``__init__.py``, left
    out); with every import, those inside functions too, but the front door's (``DistributedProblem.solve``, which
    imports the runtime and the default algorithm)."""
    import networkx as nx

    modules = {".".join(path.relative_to(PRIVCVX.parent).with_suffix("").parts): path
               for package in ("privcvx", "powerflow", "problems") for path in (PRIVCVX.parent / package).rglob("*.py")
               if path.name != "__init__.py"}
    graph = nx.DiGraph()
    for module, path in modules.items():
        front_door = ("solve",) if module == "privcvx.problem" else ()
        for name in _imports(path, module_level_only=module_level_only, skip_functions=front_door):
            target = next((m for m in (name, name.rsplit(".", 1)[0]) if m in modules and m != module), None)
            if target is not None:
                graph.add_edge(module, target)
    return list(nx.simple_cycles(graph))


def test_the_core_modules_import_each_other_without_a_cycle():
    assert _import_cycles(module_level_only=True) == []


def test_no_import_cycle_even_through_imports_inside_functions():
    assert _import_cycles(module_level_only=False) == []


def test_the_builders_take_their_declarations_from_the_declaration_layer():
    """Problems and the power-flow release bounds declare what methods assume through pc.Declared (privcvx.declared,
    privcvx.problem), not through a method's module (SampledAgent was in qdpsgd, CurvatureBound in pr_admm)."""
    from privcvx.algorithms import all_algorithms

    methods = {cls.__module__ for _, cls in all_algorithms()}
    root = PRIVCVX.parent
    paths = [*(root / "problems").rglob("*.py"), root / "powerflow" / "release_bounds.py"]
    offenders = [f"{path.name}: {name}" for path in paths for name in _imports(path)
                 if any(name == module or name.startswith(module + ".") for module in methods)]
    assert offenders == []
