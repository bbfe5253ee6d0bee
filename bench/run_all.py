"""Run every benchmark of this folder in turn, each in its own process with its default settings (``make bench``).

    .venv/bin/python bench/run_all.py [--only backends localstep ...] [--list]

Each ``bench_<name>.py`` prints its own table (docs/performance.md says what each measures). Some take many
minutes at their defaults (``convergence``, ``dpdg_steps``); ``--only`` picks some by name. The exit code is
the number of benchmarks that failed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def benches() -> dict[str, Path]:
    """Every benchmark script, by name (``bench_<name>.py``)."""
    return {path.stem.removeprefix("bench_"): path for path in sorted(HERE.glob("bench_*.py"))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", choices=sorted(benches()), help="run these benchmarks only")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    args = parser.parse_args()
    if args.list:
        print("\n".join(benches()))
        return 0
    failed = 0
    for name, path in benches().items():
        if args.only and name not in args.only:
            continue
        print(f"\n## {name} ({path.name})\n", flush=True)
        start = time.perf_counter()
        code = subprocess.call([sys.executable, str(path)], cwd=HERE.parent)
        print(f"\n({name}: exit code {code}, {time.perf_counter() - start:.0f} s)", flush=True)
        failed += code != 0
    return failed


if __name__ == "__main__":
    sys.exit(main())
