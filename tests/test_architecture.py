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


def _import_nodes(path: Path, module_level_only: bool = False,
                  skip_functions: tuple[str, ...] = ()) -> list[ast.Import | ast.ImportFrom]:
    """The import statements of a file: all of them, or only those run when the module is loaded.

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
    return [node for node in nodes if isinstance(node, (ast.Import, ast.ImportFrom))]


def _imports(path: Path, module_level_only: bool = False) -> list[str]:
    """Modules (and ``module.name``) imported by a file (`_import_nodes`)."""
    names = []
    for node in _import_nodes(path, module_level_only):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        else:
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


def _module_names(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    """Every module of ``packages`` under ``root`` by its dotted name; a package's facade, its ``__init__.py``, is
    named as the package."""
    modules = {}
    for package in packages:
        for path in (root / package).rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _import_cycles(module_level_only: bool, root: Path = PRIVCVX.parent,
                   packages: tuple[str, ...] = ("privcvx", "powerflow", "problems")) -> list[list[str]]:
    """The cycles of the import graph of ``packages``, package facades included; with every import, those inside
    functions too, but the front door's (``DistributedProblem.solve``, which imports the runtime and the default
    algorithm). ``from package import name`` is an edge to the submodule ``package.name`` when there is one, else
    to the facade (whose loading runs every import of ``__init__.py``); relative imports are resolved."""
    import networkx as nx

    modules = _module_names(root, packages)
    graph = nx.DiGraph()
    for module, path in modules.items():
        front_door = ("solve",) if module == "privcvx.problem" else ()
        here = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        for node in _import_nodes(path, module_level_only, front_door):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                base = ".".join([*here[:len(here) - node.level + 1], *filter(None, [node.module])]) if node.level \
                    else node.module or ""
                names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
            for name in names:
                while name and name not in modules:  # import a.b.c: the deepest module of it
                    name = name.rpartition(".")[0]
                if name and name != module:
                    graph.add_edge(module, name)
    return list(nx.simple_cycles(graph))


def test_the_cycle_check_sees_facades_and_relative_imports_inside_functions(tmp_path):
    """pkg -> pkg.a (module level) -> pkg.b (relative, in a function) -> pkg (the facade, in a function)."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("from pkg.a import f\nVERSION = 1\n")
    (tmp_path / "pkg" / "a.py").write_text("def f():\n    from .b import g\n    return g()\n")
    (tmp_path / "pkg" / "b.py").write_text("def g():\n    from pkg import VERSION\n    return VERSION\n")
    assert [sorted(cycle) for cycle in _import_cycles(False, tmp_path, ("pkg",))] == [["pkg", "pkg.a", "pkg.b"]]
    assert _import_cycles(True, tmp_path, ("pkg",)) == []


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


def test_every_class_has_a_distinct_name():
    """No two classes of privcvx, powerflow and problems share a name (two ADMMMonitor classes were one name for
    two things; so were the step-size rule and the local-solve strategy SmoothStep)."""
    where: dict[str, list[str]] = {}
    for path in _module_names(PRIVCVX.parent, ("privcvx", "powerflow", "problems")).values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                where.setdefault(node.name, []).append(f"{path.relative_to(PRIVCVX.parent)}:{node.lineno}")
    assert {name: places for name, places in where.items() if len(places) > 1} == {}


def test_a_method_module_takes_from_another_only_the_classes_it_extends():
    """Helpers that two methods share live in a shared module (consensus, gradient_agents, local_dp, ...): a method's
    module imports from another method's module only the classes it subclasses (IPP-ADMM extends PP-ADMM's), never
    its helpers (randomized_dgd took randomized_admm's)."""
    from privcvx.algorithms import all_algorithms

    methods = {cls.__module__ for _, cls in all_algorithms()}
    offenders = []
    for module in methods:
        path = PRIVCVX.parent / (module.replace(".", "/") + ".py")
        tree = ast.parse(path.read_text())
        bases = {ast.unparse(base) for node in ast.walk(tree) if isinstance(node, ast.ClassDef) for base in node.bases}
        for node in _import_nodes(path):
            if isinstance(node, ast.ImportFrom) and node.module in methods - {module}:
                offenders += [f"{module}: {node.module}.{alias.name}" for alias in node.names
                              if alias.name not in bases]
            else:  # a whole method module: import privcvx.algorithms.x, from privcvx.algorithms import x
                names = [alias.name if isinstance(node, ast.Import) else f"{node.module}.{alias.name}"
                         for alias in node.names]
                offenders += [f"{module}: {name}" for name in names if name in methods - {module}]
    assert offenders == []


def test_every_method_module_stays_under_about_400_lines():
    from privcvx.algorithms import all_algorithms

    lengths = {module: len((PRIVCVX.parent / (module.replace(".", "/") + ".py")).read_text().splitlines())
               for module in {cls.__module__ for _, cls in all_algorithms()}}
    assert {module: n for module, n in lengths.items() if n > 400} == {}


def test_no_method_switches_on_the_type_of_a_penalty_rule():
    """The server drives a penalty rule through its protocol (`pc.schedules.PenaltyRule`: start, observe, value,
    state): no module of privcvx.algorithms asks which rule it has (linearized_admm had 11 such switches)."""
    from privcvx.schedules import PenaltyRule

    def family(cls: type) -> set[str]:
        return {cls.__name__}.union(*(family(sub) for sub in cls.__subclasses__()))

    rules = family(PenaltyRule)
    offenders = [f"{path.name}:{node.lineno}" for path in (PRIVCVX / "algorithms").rglob("*.py")
                 for node in ast.walk(ast.parse(path.read_text()))
                 if isinstance(node, ast.Call) and ast.unparse(node.func) in ("isinstance", "issubclass")
                 and rules & {ast.unparse(name) for name in ast.walk(node.args[1])}]
    assert offenders == []


def test_a_new_method_needs_only_pc_and_pc_algorithms():
    """examples/gradient_tracking.py, a method in one file, imports privcvx through ``privcvx`` and
    ``privcvx.algorithms`` alone (it took six modules before ``LatestReleases`` and the bases were exported)."""
    nodes = _import_nodes(PRIVCVX.parent / "examples" / "gradient_tracking.py")
    modules = [alias.name for node in nodes if isinstance(node, ast.Import) for alias in node.names]
    modules += [node.module for node in nodes if isinstance(node, ast.ImportFrom)]
    assert {m for m in modules if m.split(".")[0] == "privcvx"} == {"privcvx", "privcvx.algorithms"}


def _class_name_rules(path: Path) -> list[int]:
    """Lines where ``type(x).__name__`` (directly, or through a name assigned from it) is compared with string
    constants or used as a key (``.get(...)``, ``[...]``)."""
    tree = ast.parse(path.read_text())

    def is_name_of_type(node: ast.AST) -> bool:
        return (isinstance(node, ast.Attribute) and node.attr == "__name__" and isinstance(node.value, ast.Call)
                and ast.unparse(node.value.func) == "type")

    held = {target.id for node in ast.walk(tree) if isinstance(node, ast.Assign) and is_name_of_type(node.value)
            for target in node.targets if isinstance(target, ast.Name)}

    def class_name(node: ast.AST) -> bool:
        return is_name_of_type(node) or (isinstance(node, ast.Name) and node.id in held)

    def strings(node: ast.AST) -> bool:
        items = node.elts if isinstance(node, ast.Tuple | ast.List | ast.Set) else [node]
        return all(isinstance(item, ast.Constant) and isinstance(item.value, str) for item in items)

    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(class_name(side) for side in sides) and any(strings(side) for side in sides):
                lines.append(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                and node.args and class_name(node.args[0]):
            lines.append(node.lineno)
        elif isinstance(node, ast.Subscript) and class_name(node.slice):
            lines.append(node.lineno)
    return lines


def test_rules_are_keyed_by_class_not_by_class_name(tmp_path):
    """Rules per CVXPY atom are registries keyed by class (`gradients.ATOM_RULES`, `diagnostics.FAST_ATOMS`), as
    cvxpy's canonicalizer maps: no module compares ``type(x).__name__`` with names or keys a map by it
    (gradients._compile was an if-chain on such strings, diagnostics' FAST_ATOMS a map by them). Clarabel's cone
    types, which privcvx does not import by class, are the exception."""
    offenders = [f"{path.name}:{line}" for path in _module_names(PRIVCVX.parent, ("privcvx", "powerflow", "problems"))
                 .values() for line in _class_name_rules(path) if path.name != "certificate.py"]
    assert offenders == []
    old = tmp_path / "diagnostics.py"  # the map by class names this test replaced (commit 0265546)
    old.write_text('kind = type(atom).__name__\nif kind in ("AddExpression", "NegExpression"):\n    pass\n'
                   'fast = FAST_ATOMS.get(kind)\n')
    assert _class_name_rules(old) == [2, 4]
