"""The console script's entry point: standard library only, so that a light install (``pip install vaemem``, the
estimator alone) says which extra the command line needs instead of failing on an import deep inside."""

from __future__ import annotations

import sys
from importlib.util import find_spec

TOOLKIT = ("typer", "rich", "torch", "diffusers", "pandas", "scipy", "matplotlib")  # the `measure` extra


def missing_toolkit() -> list[str]:
    """The toolkit's packages this environment lacks (found without importing them)."""
    return [name for name in TOOLKIT if find_spec(name) is None]


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] in ("--version", "-V"):
        from vaemem import __version__

        print(f"vaemem {__version__}")
        return
    missing = missing_toolkit()
    if missing:
        sys.stderr.write(f"error: the vaemem command line needs its toolkit (missing: {', '.join(missing)}); "
                         f"install it with: pip install 'vaemem[measure]'. The estimator needs nothing: "
                         f"`import vaemem.estimate`\n")
        sys.exit(2)  # as every error the command line reports (1 is a check that failed)
    from vaemem.cli import main as cli_main

    cli_main()
