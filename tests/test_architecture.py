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
    code = ("import sys, privcvx, privcvx.cli, privcvx.experiments; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('powerflow', 'problems')))")
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert output.strip() == "[]"
