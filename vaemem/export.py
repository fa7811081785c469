"""``vaemem export --python``: the estimator as one self-contained module, the coefficients embedded as literals.

The module is ``vaemem/estimate.py`` itself with its ``_EMBEDDED`` line replaced by the coefficient document
written as a Python literal (keys sorted, floats by ``repr``: byte-deterministic, diffs cleanly), so it prices
exactly what the package prices and an app can vendor it like InvokeAI's constants: it imports only the standard
library and reads no file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vaemem import estimate
from vaemem.errors import VaememError

MARKER = "_EMBEDDED: dict | None = None\n"


def _literal(obj: Any, indent: int = 0) -> str:
    """``obj`` (JSON data) as a deterministic Python literal."""
    pad = "    " * (indent + 1)
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        items = [f"{pad}{k!r}: {_literal(obj[k], indent + 1)}," for k in sorted(obj)]
        return "{\n" + "\n".join(items) + "\n" + "    " * indent + "}"
    if isinstance(obj, list):
        if all(not isinstance(v, (dict, list)) for v in obj):
            return "[" + ", ".join(_literal(v) for v in obj) + "]"
        return "[\n" + "\n".join(f"{pad}{_literal(v, indent + 1)}," for v in obj) + "\n" + "    " * indent + "]"
    if isinstance(obj, float) and obj != obj or obj in (float("inf"), float("-inf")):
        raise VaememError(f"cannot export a non-finite number {obj!r}")
    return repr(obj)


def python_module(doc: dict[str, Any], source_name: str) -> str:
    """The text of the exported module for the coefficient document ``doc`` (validated first)."""
    public = {k: v for k, v in doc.items() if not k.startswith("_")}
    try:
        estimate.validate(dict(public), source_name)
    except ValueError as e:
        raise VaememError(str(e)) from None
    text = Path(estimate.__file__).read_text()
    if text.count(MARKER) != 1:
        raise VaememError("vaemem/estimate.py has no single _EMBEDDED line to replace: cannot export")
    body = _literal(public)
    digest = estimate.coefficients_sha256(public)  # what the module's coefficients_sha256() returns
    header = (f"# Exported by `vaemem export --python` (vaemem {__import__('vaemem').__version__}) from "
              f"{source_name}, coefficients sha256:{digest}.\n# Self-contained: the standard library only, no file "
              f"read. Regenerate it rather than edit it.\n")
    return header + text.replace(MARKER, f"_EMBEDDED: dict | None = {body}\n")
