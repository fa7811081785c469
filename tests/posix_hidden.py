"""A pytest plugin that runs tests as a Windows Python would see this machine: ``pytest -p posix_hidden``.

It hides what Windows lacks (``fcntl``, ``resource``, ``termios``, ``pty``, ``grp``, ``pwd``; ``os.fork``,
``os.killpg``, ``os.setsid``, ``os.setpgid``, ``os.getpgid``; ``signal.SIGHUP``), says
``sys.platform == "win32"`` while a test body runs, so vaemem takes its Windows paths (the ``msvcrt`` file lock,
the spawn launcher), and provides ``msvcrt.locking`` with Windows' semantics (a byte range from the current
position; unlocked explicitly) on top of POSIX record locks. torch and diffusers are imported first, with the real platform: what is tested is vaemem's code, not theirs. The measuring
children are real Linux interpreters: only the parent's side runs hidden.
"""

from __future__ import annotations

import importlib.abc
import os
import signal
import sys
import types

import diffusers  # noqa: F401  (imported before the platform is faked: see above)
import torch  # noqa: F401

import fcntl as _fcntl
import pytest

HIDDEN_MODULES = frozenset({"fcntl", "resource", "termios", "pty", "grp", "pwd"})
HIDDEN_OS = ("fork", "forkpty", "killpg", "setsid", "setpgid", "getpgid")
HIDDEN_SIGNALS = ("SIGHUP",)  # (SIGKILL stays: this process's own subprocess module is POSIX's, and kills with it)


class _Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name in HIDDEN_MODULES:
            raise ModuleNotFoundError(f"No module named {name!r} (hidden: Windows has none)", name=name)
        return None


def _fake_msvcrt() -> types.ModuleType:
    mod = types.ModuleType("msvcrt")
    mod.LK_UNLCK, mod.LK_LOCK, mod.LK_NBLCK = 0, 1, 2
    held: set[int] = set()

    def locking(fd: int, mode: int, nbytes: int) -> None:
        if mode == mod.LK_UNLCK:
            if fd not in held:
                raise OSError(13, "unlocking a region that is not locked")
            _fcntl.lockf(fd, _fcntl.LOCK_UN, nbytes, 0, os.SEEK_CUR)
            held.discard(fd)
        else:
            _fcntl.lockf(fd, _fcntl.LOCK_EX | (_fcntl.LOCK_NB if mode == mod.LK_NBLCK else 0), nbytes, 0, os.SEEK_CUR)
            held.add(fd)

    mod.locking = locking
    mod.held = held  # tests: every lock taken was released
    return mod


for _name in HIDDEN_MODULES:
    sys.modules.pop(_name, None)
sys.meta_path.insert(0, _Hide())
for _name in HIDDEN_OS:
    if hasattr(os, _name):
        delattr(os, _name)
for _name in HIDDEN_SIGNALS:
    if hasattr(signal, _name):
        delattr(signal, _name)
sys.modules["msvcrt"] = _fake_msvcrt()
_REAL_PLATFORM = sys.platform
os.environ["VAEMEM_POSIX_HIDDEN"] = "1"  # tests/test_portable.py checks the hiding took


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    # The platform is faked while a test body runs, not while pytest itself works (it has Windows paths too).
    sys.platform = "win32"
    try:
        yield
    finally:
        sys.platform = _REAL_PLATFORM


def pytest_report_header(config):
    return "posix_hidden: fcntl, resource, termios, pty, grp, pwd, os.fork/killpg/setsid/setpgid and " \
           "signal.SIGHUP hidden; " \
           "sys.platform = win32"
