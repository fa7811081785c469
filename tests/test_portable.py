"""Windows readiness, tested here: the portable tests re-run with the POSIX paths hidden (tests/posix_hidden.py)."""

from __future__ import annotations

import importlib
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import vaemem
from vaemem.measuring.parent.store import append_record, iter_records

TESTS = Path(__file__).parent


@pytest.mark.portable
def test_every_module_imports():
    if os.environ.get("VAEMEM_POSIX_HIDDEN"):  # the hidden run: the hiding took
        with pytest.raises(ImportError):
            import fcntl  # noqa: F401
        assert not hasattr(os, "fork") and not hasattr(os, "killpg") and sys.platform == "win32"
    names = [m.name for m in pkgutil.walk_packages(vaemem.__path__, "vaemem.")]
    assert "vaemem.measuring.parent.store" in names and "vaemem.measuring.plumbing.forkserver" in names
    for name in names:
        importlib.import_module(name)


@pytest.mark.portable
def test_an_append_releases_its_lock(tmp_path):
    path = tmp_path / "m.jsonl"
    append_record(path, {"schema_version": 1, "i": 0})
    if sys.platform == "win32":  # the hidden run: the fake msvcrt saw every lock released before close
        assert sys.modules["msvcrt"].held == set()
    else:
        import fcntl

        with open(path, "ab") as f:  # another open file: blocks forever if the lock were still held
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    append_record(path, {"schema_version": 1, "i": 1})
    assert [r["i"] for _, _, r in iter_records([path])] == [0, 1]


def test_the_portable_tests_pass_with_the_posix_paths_hidden():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "posix_hidden", "-p", "no:cacheprovider", "-m", "portable",
         str(TESTS / "test_measure.py"), str(TESTS / "test_cli.py"), str(TESTS / "test_portable.py")],
        capture_output=True, text=True, env=env, cwd=TESTS.parent, timeout=900)
    tail = proc.stdout[-3000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, tail
    assert "posix_hidden: fcntl" in proc.stdout and " passed" in tail and "skipped" not in tail, tail


def test_the_measuring_modules_import_and_run_their_windows_paths_without_posix_signals():
    """Windows has no SIGKILL nor SIGHUP: a module naming one at import (a default argument did) crashed every
    spawned run there. The plugin cannot hide SIGKILL (its own subprocess module kills with it): a fresh
    interpreter without both imports them, and the parent-death call is a no-op off Linux."""
    code = ("import signal, sys\ndel signal.SIGKILL, signal.SIGHUP\n"
            "import vaemem.measuring.plumbing.forkserver as fs, vaemem.measuring.parent.runner as r\n"
            "import vaemem.measuring.child.worker, vaemem.measuring.plumbing.launcher, vaemem.conv3d.bench\n"
            "sys.platform = 'win32'\nfs.die_with_parent(12345)\n"
            "from vaemem.measuring.plumbing.launcher import RunOutcome\n"
            "print(r.classify(RunOutcome(None, 1, False, '', 1.0, 1), oom_kills=1)[0])\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0 and res.stdout.strip() == "crash", res.stderr[-1500:]
