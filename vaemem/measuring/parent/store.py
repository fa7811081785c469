"""The measurement file: JSON Lines, one line per run, appended whole under a file lock.

Each line is written by one ``os.write`` of the complete line on an ``O_APPEND`` descriptor while holding an
exclusive lock (``fcntl.flock`` on POSIX, ``msvcrt.locking`` on Windows, both imported where used), then
fsync-ed: two sweeps writing one file, or an interrupt at any moment, leave only whole lines. A short or failed
write (a full disk) is cut back to the file's previous length before the lock is released, so the next writer
never glues its line onto half of one. Readers refuse a line of a newer or unknown ``schema_version``, or one
missing a field or holding an impossible value, naming file and line (see README, "Measurement format").
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vaemem.errors import VaememError
from vaemem.files import schema_error

SCHEMA_VERSION = 1


def dumps_line(record: dict[str, Any]) -> bytes:
    """One record as a canonical JSON line (sorted keys, no spaces): files diff cleanly."""
    return (json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n").encode()


def _lock(fd: int, wait: bool = True) -> None:
    """The file's exclusive lock; without ``wait``, OSError at once where another holds it."""
    if sys.platform == "win32":
        import msvcrt

        os.lseek(fd, 0, os.SEEK_SET)
        # a one-byte region at the start: the whole file's lock
        msvcrt.locking(fd, msvcrt.LK_LOCK if wait else msvcrt.LK_NBLCK, 1)
    else:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))


def _unlock(fd: int) -> None:
    """Windows wants its byte-range lock released before the descriptor closes; POSIX releases on close."""
    if sys.platform == "win32":
        import msvcrt

        os.lseek(fd, 0, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)


SUFFIX = ".jsonl"  # a measurement file's: fit, report and a resumed sweep read a folder's files of it, and no other


def check_out_path(path: str | Path) -> None:
    """Refuse an output file that cannot take appended lines, before any process starts: it must be a regular
    file, or a new one in a folder that exists (or can be made) and takes files. Creates nothing."""
    import tempfile

    path = Path(path)
    if path.exists() and not path.is_file():
        raise VaememError(f"--out {path} is not a regular file (a directory, device or pipe): name a .jsonl file")
    if path.suffix != SUFFIX:
        raise VaememError(f"--out {path}: name a .jsonl file (fit and report read a folder's .jsonl files)")
    folder = path.parent
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir():
        raise VaememError(f"--out {path}: {folder} is not a directory")
    if path.exists():
        if not os.access(path, os.W_OK):
            raise VaememError(f"--out {path}: not writable")
        return
    try:  # /proc and other pseudo filesystems pass access() and still refuse: try a real (deleted) file
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as e:
        raise VaememError(f"--out {path}: cannot create a file in {folder} ({e.strerror})") from None


@contextlib.contextmanager
def sweep_lock(path: str | Path) -> Iterator[None]:
    """Hold the sweep lock of the measurement file ``path`` (``.r.jsonl.lock`` beside ``r.jsonl``, left there:
    removing it would race a sweep opening it), or refuse at once where another sweep holds it: two sweeps
    appending to one file each planned every run from the same history, and ran each twice. Released on exit, or
    by the OS when the process dies."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = path.parent / f".{path.name}.lock"
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise VaememError(f"cannot create the sweep lock {lock}: {e.strerror}") from None
    try:
        try:
            _lock(fd, wait=False)
        except OSError:
            raise VaememError(f"another sweep is appending to {path} (it holds {lock}): let it finish, or give "
                              f"this one another --out") from None
        try:
            yield
        finally:
            _unlock(fd)
    finally:
        os.close(fd)


def append_record(path: str | Path, record: dict[str, Any]) -> None:
    """Append one record as one whole line (locked, single write, fsync), or nothing at all."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = dumps_line(record)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        _lock(fd)
    except BaseException:
        os.close(fd)
        raise
    try:
        size = os.lseek(fd, 0, os.SEEK_END)
        try:
            written = os.write(fd, data)
            if written != len(data):  # a short write on a regular file means a full disk
                raise OSError(28, "short write (disk full?)")
            os.fsync(fd)
        except OSError as e:
            os.ftruncate(fd, size)  # all or nothing: cut the partial line before the lock is released
            raise VaememError(f"cannot append to {path}: {e.strerror or e}; the line was not written") from None
    finally:
        try:
            _unlock(fd)
        finally:
            os.close(fd)


@dataclass(frozen=True)
class BadLine:
    path: Path
    line: int
    reason: str
    newer: bool = False  # a line of a newer schema: whole, for a newer vaemem to read

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}"


STATUSES = ("ok", "oom", "crash", "timeout", "error", "skipped-after-oom", "dropped-late")
_POSITIVE = ("width", "height", "batch", "frames")


MAX_DEMAND_BYTES = 2**60  # no rig holds an exbibyte: a larger demand is a damaged line


def demand_error(demand: object) -> str | None:
    """Why ``demand`` cannot be an ok run's ``demand_bytes`` (a non-negative integer of bytes, at most
    :data:`MAX_DEMAND_BYTES`), or None."""
    if not isinstance(demand, int) or isinstance(demand, bool) or demand < 0:
        return f"an ok run needs a non-negative integer demand_bytes, got {demand!r}"
    if demand > MAX_DEMAND_BYTES:
        return f"demand_bytes {demand} is above an exbibyte: no machine measured it"
    return None


def _check(record: Any) -> str | None:
    """Why ``record`` is unusable, or None. A measurement line (no ``kind``) must carry its point, identity,
    status and rig name with the right types, and a non-negative integer demand when ok."""
    if not isinstance(record, dict):
        return "not a JSON object"
    wrong = schema_error(record.get("schema_version"), (SCHEMA_VERSION,))
    if wrong:
        return wrong
    if "kind" in record or "status" not in record and "point_key" not in record and "model" not in record:
        return None  # another line kind (bench-conv3d), or a bare line: the reader of that kind checks it
    for name in ("model", "op", "dtype", "point_key"):
        if not isinstance(record.get(name), str):
            return f"{name} missing or not a string"
    for name in (*_POSITIVE, "run"):
        v = record.get(name)
        if not isinstance(v, int) or isinstance(v, bool) or v < (0 if name == "run" else 1):
            return f"{name} missing or not a {'non-negative' if name == 'run' else 'positive'} integer: {v!r}"
    if record.get("status") not in STATUSES:
        return f"status {record.get('status')!r} is not one of {', '.join(STATUSES)}"
    if record["status"] == "ok":
        unusable = demand_error(record.get("demand_bytes"))
        if unusable:
            return unusable
    if not isinstance(record.get("rig"), dict) or not isinstance(record["rig"].get("name"), str):
        return "rig.name missing"
    return None


def iter_records(paths: Iterable[str | Path], skip_bad: bool = False,
                 bad: list[BadLine] | None = None) -> Iterator[tuple[Path, int, dict[str, Any]]]:
    """(file, line number, record) of every line of ``paths``. A malformed, truncated or wrong-schema line raises
    VaememError naming file and line, unless ``skip_bad``: then it is appended to ``bad`` and skipped."""
    for p in paths:
        p = Path(p)
        if not p.is_file():  # a FIFO or a device would block or never end
            raise VaememError(f"{p} is not a regular file")
        try:
            data = p.read_bytes()
        except OSError as e:
            raise VaememError(f"cannot read {p}: {e.strerror}") from None
        lines = data.split(b"\n")
        for no, raw in enumerate(lines, 1):
            if not raw.strip():
                continue
            reason, newer = None, False
            if no == len(lines):  # text after the last newline: a line cut off mid-write
                reason = "truncated line (no newline at end)"
            else:
                try:
                    record = json.loads(raw)
                    reason = _check(record)
                    version = record.get("schema_version") if isinstance(record, dict) else None
                    newer = type(version) is int and version > SCHEMA_VERSION
                except UnicodeDecodeError:  # a ValueError without .msg: binary bytes, not a measurement file
                    reason = "not UTF-8 text (a binary file?)"
                except ValueError as e:
                    reason = f"malformed JSON ({e.msg})"
            if reason is not None:
                if not skip_bad:  # said with its remedy: nothing reads past it, a resumed sweep included
                    raise VaememError(f"{p}:{no}: {reason}; delete or repair that line (fit, report and plot can "
                                      f"skip it with --skip-bad)")
                if bad is not None:
                    bad.append(BadLine(p, no, reason, newer))
                continue
            yield p, no, record


def expand_paths(items: Iterable[str | Path]) -> list[Path]:
    """Files as given, directories as every ``*.jsonl`` directly inside them, sorted."""
    out: list[Path] = []
    for item in items:
        p = Path(item)
        if p.is_dir():
            out.extend(sorted(p.glob(f"*{SUFFIX}")))
        elif p.exists() and p.suffix != SUFFIX:  # as measure --out: a coefficient file or a dry-run cache given
            # here would read as a malformed line, with the advice to delete it
            raise VaememError(f"{p}: not a measurement file (those are the .jsonl files `vaemem measure` writes)")
        elif p.exists():
            out.append(p)
        else:
            raise VaememError(f"no such measurement file or directory: {p}")
    return out


def load_measurements(paths: Iterable[str | Path] | str | Path, skip_bad: bool = False) -> Any:
    """Every run in ``paths`` (files or directories) as a pandas DataFrame, one row per run.

    Nested fields are flattened with dots (``rig.conv_backend``, ``readings.peak_rss_bytes``); ``source_file`` and
    ``source_line`` say where each row came from.
    """
    import pandas as pd

    if isinstance(paths, (str, Path)):
        paths = [paths]
    rows = []
    for path, no, record in iter_records(expand_paths(paths), skip_bad=skip_bad):
        rows.append({**record, "source_file": str(path), "source_line": no})
    if not rows:
        return pd.DataFrame()
    return pd.json_normalize(rows, max_level=1)
