"""Convert the Sphinx roles of docstrings (:class:`x`, :func:`x`, :meth:, :mod:, :data:, :attr:) to Markdown.

mkdocstrings renders docstrings as Markdown, where a Sphinx role shows as raw text. Each role becomes an autorefs
cross-reference ``[C][privcvx.privacy.mechanisms.C]`` when its target is a fully qualified public object of a module
that the API pages render (``docs/api/*.md``, ``::: module``), so that the strict site build resolves it; every
other role becomes a code span (``x``, or the last component for ``~a.b.x``). Only triple-quoted strings (the
docstrings) and ``#:`` attribute comments change. Idempotent: a second run changes nothing.

    PYTHONPATH=. python tests/scripts/sphinx_roles_to_markdown.py           # rewrite privcvx/, problems/, powerflow/
    PYTHONPATH=. python tests/scripts/sphinx_roles_to_markdown.py --check   # exit 1 if a role is left
"""

from __future__ import annotations

import argparse
import importlib
import io
import re
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("privcvx", "problems", "powerflow")
#: The project's line length (ruff): a converted line never exceeds it.
LINE_LENGTH = 120
ROLE = re.compile(r":(?:py:)?(class|func|meth|mod|data|attr|exc|obj|const):`(~?)([^`<]*?)(?:\s*<([^`>]+)>)?`")


def documented_modules() -> set[str]:
    """The modules the API pages render (``::: module`` lines of docs/api/*.md)."""
    found: set[str] = set()
    for page in (ROOT / "docs" / "api").glob("*.md"):
        found |= set(re.findall(r"^::: ([\w.]+)$", page.read_text(), flags=re.MULTILINE))
    return found


def anchor(path: str, documented: set[str]) -> str | None:
    """The rendered identifier of the fully qualified ``path``, or None when the site has no anchor for it."""
    if not path.startswith(tuple(f"{package}." for package in PACKAGES)) and path not in PACKAGES:
        return None
    parts = path.split(".")
    if any(part.startswith("_") for part in parts):
        return None
    for split in range(len(parts), 0, -1):  # the longest importable module prefix, then attributes
        module_name = ".".join(parts[:split])
        try:
            obj = importlib.import_module(module_name)
        except ImportError:
            continue
        if split == len(parts):
            return module_name if module_name in documented else None
        owner_module = module_name
        for name in parts[split:]:
            if not hasattr(obj, name):
                return None
            obj = getattr(obj, name)
        home = getattr(obj, "__module__", None)
        qualname = getattr(obj, "__qualname__", None)
        if home and qualname and "<" not in qualname and home in documented:
            return f"{home}.{qualname}"  # where it is defined (and rendered), e.g. a re-exported class
        if owner_module in documented and len(parts) - split == 1:  # module-level data (:data:)
            return path
        return None
    return None


def _parts(match: re.Match, documented: set[str]) -> tuple[str, str | None]:
    """The text shown and the autorefs identifier (None: a code span only) of one role."""
    _, tilde, title, target = match.groups()
    path = " ".join((target or title).split())
    shown = " ".join(title.split()) if target else (path.split(".")[-1] if tilde else path)
    return shown, anchor(path, documented)


def convert_text(text: str, documented: set[str], *, offset: int = 0) -> str:
    """``text`` with its roles converted; ``offset``: the column ``text`` starts at in its first line.

    A cross-reference is used only where its line stays within LINE_LENGTH (else the shorter code span), and a role
    that spans two lines keeps the line break, so no line grows past the limit."""

    def split_role(match: re.Match) -> str:  # a role broken over two lines: code span, then the break
        shown, _ = _parts(match, documented)
        indent = re.search(r"\n([ \t]*)", match.group(0)).group(1)
        return f"`{shown}`\n{indent}"

    text = ROLE.sub(lambda m: split_role(m) if "\n" in m.group(0) else m.group(0), text)
    lines = text.split("\n")
    for number, line in enumerate(lines):
        start = offset if number == 0 else 0
        position = 0
        while (match := ROLE.search(line, position)) is not None:
            shown, ref = _parts(match, documented)
            span = f"`{shown}`"
            linked = f"[{span}][{ref}]" if ref else span
            candidate = line[:match.start()] + linked + line[match.end():]
            if start + len(candidate) > LINE_LENGTH:
                candidate = line[:match.start()] + span + line[match.end():]
                linked = span
            line = candidate
            position = match.start() + len(linked)
        lines[number] = line
    return "\n".join(lines)


def convert_source(source: str, documented: set[str]) -> str:
    """``source`` with the roles of its triple-quoted strings converted (everything else byte for byte)."""
    lines = source.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    edits = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        docstring = token.type == tokenize.STRING and re.match(r"^[rRuU]?(\"\"\"|''')", token.string)
        doc_comment = token.type == tokenize.COMMENT and token.string.startswith("#:")
        if (docstring or doc_comment) and ROLE.search(token.string):
            start = offsets[token.start[0] - 1] + token.start[1]
            end = offsets[token.end[0] - 1] + token.end[1]
            edits.append((start, end, convert_text(token.string, documented, offset=token.start[1])))
    for start, end, text in reversed(edits):
        source = source[:start] + text + source[end:]
    return source


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report the files that still hold roles")
    options = parser.parse_args(argv)
    documented = documented_modules()
    left = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            source = path.read_text()
            converted = convert_source(source, documented)
            if converted != source:
                left.append(path.relative_to(ROOT))
                if not options.check:
                    path.write_text(converted)
    print(("roles left in: " if options.check else "converted: ") + (", ".join(map(str, left)) or "none"))
    return 1 if options.check and left else 0


if __name__ == "__main__":
    sys.exit(main())
