"""The documentation site: built strictly, every public name documented, every module in the API reference."""

from __future__ import annotations

import importlib
import inspect
import os
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("privcvx", "powerflow", "problems")


def _modules() -> list[str]:
    names = []
    for package in PACKAGES:
        names.append(package)
        module = importlib.import_module(package)
        names += [info.name for info in pkgutil.walk_packages(module.__path__, prefix=f"{package}.")]
    return names


def _public(module_name: str):
    """(qualified name, object) of every public class, function and method defined in the module."""
    module = importlib.import_module(module_name)
    for name, obj in vars(module).items():
        if name.startswith("_") or getattr(obj, "__module__", None) != module_name:
            continue
        if inspect.isfunction(obj):
            yield f"{module_name}.{name}", obj
        elif inspect.isclass(obj):
            yield f"{module_name}.{name}", obj
            for attr, member in vars(obj).items():
                if not attr.startswith("_") and inspect.isfunction(member):
                    yield f"{module_name}.{name}.{attr}", member


def test_every_public_name_has_a_docstring():
    """Modules, public classes, functions and methods (a method may inherit its base class's docstring)."""
    missing = [m for m in _modules() if not (inspect.getdoc(importlib.import_module(m)) or "").strip()]
    missing += [qualified for m in _modules() for qualified, obj in _public(m)
                if not (inspect.getdoc(obj) or "").strip()]
    assert missing == []


def test_every_module_is_in_the_api_reference():
    documented = set()
    for page in (ROOT / "docs" / "api").glob("*.md"):
        documented |= set(re.findall(r"^::: ([\w.]+)$", page.read_text(), flags=re.MULTILINE))
    leaves = [m for m in _modules() if not hasattr(importlib.import_module(m), "__path__")]
    assert sorted(set(leaves) - documented) == []


def test_the_docs_cite_papers_not_paths_outside_the_repository():
    offenders = [f"{path.name}: {hit}" for path in [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]
                 for hit in re.findall(r"[\w./]*shared/(?:papers|notes|design)[\w./-]*", path.read_text())]
    assert offenders == []


def test_the_site_builds_strictly(tmp_path):
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                           cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)
    assert built.returncode == 0, built.stderr[-3000:]
    api = (tmp_path / "site" / "api" / "core" / "index.html").read_text()
    for name in ("privcvx.problem.DistributedProblem", "privcvx.results.Result", "privcvx.topology.Topology"):
        assert name in api


def test_docstrings_hold_no_sphinx_roles():
    """mkdocstrings renders Markdown, where a Sphinx role shows raw (run: tests/scripts/sphinx_roles_to_markdown.py)."""
    converter = ROOT / "tests" / "scripts" / "sphinx_roles_to_markdown.py"
    checked = subprocess.run([sys.executable, str(converter), "--check"], capture_output=True, text=True, cwd=ROOT,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert checked.returncode == 0, checked.stdout + checked.stderr


def _instrumented(block: str) -> str:
    """The recipe with a check after every line ``name = ...  # ... -> N rounds``: it records (line, rounds run,
    rounds stated)."""
    lines = []
    for line in block.splitlines():
        lines.append(line)
        stated = re.match(r"^(\w+) = .*#.*-> (\d+) rounds", line)
        if stated:
            lines.append(f"_rounds.append(({line!r}, len({stated.group(1)}.history), {stated.group(2)}))")
    return "\n".join(lines)


def test_powerflow_recipes_run_and_take_the_rounds_they_state():
    """Every ```python block of docs/powerflow.md runs, and every run it marks "-> N rounds" takes N rounds."""
    import matplotlib

    matplotlib.use("Agg")
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "powerflow.md").read_text(), flags=re.DOTALL)
    assert len(blocks) >= 3
    rounds: list[tuple[str, int, int]] = []
    for block in blocks:
        exec(compile(_instrumented(block), "docs/powerflow.md", "exec"), {"_rounds": rounds})  # noqa: S102
    assert len(rounds) >= 4
    assert [(line, run) for line, run, stated in rounds] == [(line, stated) for line, run, stated in rounds]
