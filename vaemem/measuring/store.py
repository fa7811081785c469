"""The measurement file: JSON Lines, one line per run, appended whole under a file lock.

Each line is written by one ``os.write`` of the complete line on an ``O_APPEND`` descriptor while holding an
exclusive ``flock``, then fsync-ed: two sweeps writing one file, or an interrupt at any moment, leave only whole
lines. Readers refuse a line of a newer or unknown ``schema_version`` (see README, "Measurement format").
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vaemem.errors import VaememError

SCHEMA_VERSION = 1


def dumps_line(record: dict[str, Any]) -> bytes:
    """One record as a canonical JSON line (sorted keys, no spaces): files diff cleanly."""
    return (json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n").encode()


def append_record(path: str | Path, record: dict[str, Any]) -> None:
    """Append one record as one whole line (locked, single write, fsync)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = dumps_line(record)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        written = os.write(fd, data)
        if written != len(data):  # a short write on a regular file means a full disk: say so, do not half-write
            raise VaememError(f"short write to {path}: disk full?")
        os.fsync(fd)
    finally:
        os.close(fd)  # closing releases the lock


@dataclass(frozen=True)
class BadLine:
    path: Path
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}"


def _check(record: Any) -> str | None:
    """Why ``record`` is unusable, or None."""
    if not isinstance(record, dict):
        return "not a JSON object"
    version = record.get("schema_version")
    if not isinstance(version, int):
        return "no integer schema_version"
    if version > SCHEMA_VERSION:
        return f"schema_version {version} is newer than this vaemem understands ({SCHEMA_VERSION}); upgrade vaemem"
    if version != SCHEMA_VERSION:
        return f"unknown schema_version {version} (this vaemem reads {SCHEMA_VERSION})"
    return None


def iter_records(paths: Iterable[str | Path], skip_bad: bool = False,
                 bad: list[BadLine] | None = None) -> Iterator[tuple[Path, int, dict[str, Any]]]:
    """(file, line number, record) of every line of ``paths``. A malformed, truncated or wrong-schema line raises
    VaememError naming file and line, unless ``skip_bad``: then it is appended to ``bad`` and skipped."""
    for p in paths:
        p = Path(p)
        try:
            data = p.read_bytes()
        except OSError as e:
            raise VaememError(f"cannot read {p}: {e.strerror}") from None
        lines = data.split(b"\n")
        for no, raw in enumerate(lines, 1):
            if not raw.strip():
                continue
            reason = None
            if no == len(lines):  # text after the last newline: a line cut off mid-write
                reason = "truncated line (no newline at end)"
            else:
                try:
                    record = json.loads(raw)
                    reason = _check(record)
                except ValueError as e:
                    reason = f"malformed JSON ({e.msg})"
            if reason is not None:
                if not skip_bad:
                    raise VaememError(f"{p}:{no}: {reason}")
                if bad is not None:
                    bad.append(BadLine(p, no, reason))
                continue
            yield p, no, record


def expand_paths(items: Iterable[str | Path]) -> list[Path]:
    """Files as given, directories as every ``*.jsonl`` directly inside them, sorted."""
    out: list[Path] = []
    for item in items:
        p = Path(item)
        if p.is_dir():
            out.extend(sorted(p.glob("*.jsonl")))
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
