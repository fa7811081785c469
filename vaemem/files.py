"""Files: the one atomic writer (coefficient files, dry-run caches, exported modules), the one schema_version rule
of the files vaemem reads (the coefficient file's is the stdlib estimator's own), and where default files live."""

from __future__ import annotations

import functools
import os
import tempfile
from pathlib import Path

from vaemem.errors import VaememError


def schema_error(version: object, reads: tuple[int, ...]) -> str | None:
    """Why a file's ``schema_version`` is not one of ``reads``, the schemas this vaemem reads, or None. An int only
    (JSON's ``true`` is no schema, though Python's bool is an int); a newer one says to upgrade vaemem."""
    newest = max(reads)
    if type(version) is not int:
        return f"no integer schema_version (got {version!r})"
    if version > newest:
        return f"schema_version {version} is newer than this vaemem reads ({newest}); upgrade vaemem"
    if version not in reads:
        return f"schema_version {version} is not one this vaemem reads ({', '.join(map(str, reads))})"
    return None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder, fsync and a rename: a reader sees
    the old file or the new one, never half of one. The file gets the usual mode (0666 less the umask), not the
    temporary file's 0600. Any failure is one VaememError naming the path."""
    path = check_writable(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:
        raise VaememError(f"cannot write {path}: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise VaememError(f"cannot write {path}: {e.strerror or e}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def check_writable(path: str | Path) -> Path:
    """Refuse a ``path`` that :func:`write_atomic` could not replace (a directory, a device or pipe, a folder that is
    a file), before the work whose result it is to hold; return the real path it would write."""
    given = Path(path)
    path = Path(os.path.realpath(given))  # through a symbolic link: the link stays, its target is replaced
    if path.is_dir():
        raise VaememError(f"cannot write {given}: it is a directory")
    if path.exists() and not path.is_file():  # a device or a pipe: a rename would replace the node itself
        raise VaememError(f"cannot write {given}: not a regular file (a device, pipe or socket)")
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise VaememError(f"cannot write {path}: {folder} is not a directory")
    return path


@functools.cache  # read once: every default path of the CLI asks at import
def checkout_root() -> Path | None:
    """The repository this package runs from (an editable install or a checkout on ``sys.path``), or None for an
    installed wheel: the folder above the package, when it holds vaemem's ``pyproject.toml``."""
    root = Path(__file__).resolve().parent.parent
    try:
        return root if 'name = "vaemem"' in (root / "pyproject.toml").read_text() else None
    except OSError:
        return None


def default_path(relative: str) -> Path:
    """Where a default file of the toolkit lives: under the checkout when there is one (so commands work from
    any folder), else relative to the current folder. Errors about it then name the full path looked for."""
    root = checkout_root()
    return root / relative if root is not None else Path(relative)


def packaged_coefficients() -> Path:
    """The coefficient file shipped inside the package, which ``fit`` writes by default and the estimator reads."""
    return Path(__file__).resolve().parent / "coefficients.json"
