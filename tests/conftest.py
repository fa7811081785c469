"""Shared fixtures: a fake launcher for runner logic, helpers to find a sweep's child processes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from vaemem import estimate as est
from vaemem.measuring.child.rig import _cpu_name  # a worker on this machine reports its CPU
from vaemem.measuring.plumbing.launcher import Launcher, RunOutcome
from vaemem.measuring.point import Point



class FakeLauncher(Launcher):
    """Returns canned outcomes: demand = pixels * bytes_per_pixel, or the status chosen per point key."""

    name = "fake"

    def __init__(self, bytes_per_pixel: int = 100, fail: dict[str, str] | None = None) -> None:
        self.bytes_per_pixel = bytes_per_pixel
        self.fail = fail or {}
        self.ran: list[Point] = []

    def run(self, task: dict, allocator: str, timeout_s: float) -> RunOutcome:
        point = Point.from_dict(task["point"])
        assert task["kind"] == "measure" and allocator == point.allocator
        self.ran.append(point)
        status = self.fail.get(point.key, "ok")
        if status == "crash":
            return RunOutcome(None, -11, False, "Segmentation fault", 0.1, 1234)
        if status == "timeout":
            return RunOutcome(None, -9, True, "", timeout_s, 1234)
        demand = point.pixels * self.bytes_per_pixel
        result = {"status": status, "demand_bytes": demand if status == "ok" else None,
                  "readings": {"baseline_rss_bytes": 1000, "peak_rss_bytes": 1000 + demand},
                  "rig": {"backend": "cpu", "conv_backend": "onednn", "device_name": _cpu_name()}, "op_wall_s": 0.01}
        return RunOutcome(result, 0, False, "", 0.01, 1234)


def descendants(pid: int) -> list[int]:
    """All live descendants of ``pid`` (children of children too), from /proc."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = [], [pid]
    while frontier:
        p = frontier.pop()
        kids = [c for c, pp in parents.items() if pp == p]
        found += kids
        frontier += kids
    return found


@pytest.fixture
def fake_launcher() -> FakeLauncher:
    return FakeLauncher()


def as_schema(doc: dict, version: int) -> dict:
    """``doc`` (a coefficient document) relabelled as a file of an older schema ``version``, in place: before
    schema 8 no file held the onednn-amx key, so its groups and calibrations go; before 11 no structure held the
    factor of a CPU without AMX, and no own line a copy branch; before 12 no structure the live bytes at its
    convolutions' calls; before 13 no own line a resident branch; before 14 no calibration a variant's lines; before
    15 the math path's oneDNN buffers are on its whole peak (a rule, nothing to remove); before 16 no line a flat
    branch; before 17 no structure a oneDNN factor per knot (it held the largest); before 18 no calibration a first
    call's cost; before 20 no line its smallest dry-run peak (before 21 a half-precision batch is priced by its dry
    run and the copy, before 22 the factors counted an fp32 convolution's output alone: rules, nothing to
    remove); before 23 no line its one-frame points' largest dry run (before 24 a channels-last call's live bytes
    held its output's reorder: a rule, nothing to remove); before 25 no structure a oneDNN factor of a batch, before 26 the live
    bytes at a batch's calls."""
    doc["schema_version"] = version
    if version < 26:  # no structure the live bytes at a batch's convolution calls
        for s in doc.get("structures", {}).values():
            if "conv_transients" in s:
                s["conv_transients"] = [c[:9] for c in s["conv_transients"]]
    if version < 25:  # no structure carries a oneDNN factor of a batch
        _drop(doc.get("structures", {}), "onednn_hidden_factor_batch")
        _drop(doc.get("structures", {}), "onednn_hidden_factor_no_amx_batch")
    if version < 23:  # no line carries its one-frame points' largest dry run
        _drop(doc.get("calibrations", []), "single_frame_dry_max")
    if version < 8:
        doc["groups"] = [g for g in doc["groups"] if g["conv_backend"] != "onednn-amx"]
        doc["calibrations"] = [c for c in doc.get("calibrations", []) if c["conv_backend"] != "onednn-amx"]
    if version < 11:  # nor an own line its copy branch
        for s in doc.get("structures", {}).values():
            s.pop("onednn_hidden_factor_no_amx", None)
        for c in doc.get("calibrations", []):
            for line in c["architectures"].values():
                line.pop("copy_line", None)
    if version < 12:
        for s in doc.get("structures", {}).values():
            if "conv_transients" in s:
                s["conv_transients"] = [c[:7] for c in s["conv_transients"]]
    if version < 13:
        for c in doc.get("calibrations", []):
            for line in c["architectures"].values():
                for branch in (line, line.get("copy_line", {})):
                    for name in ("resident_factor", "resident_bytes", "single_frame_resident_bytes"):
                        branch.pop(name, None)
    if version < 14:
        for c in doc.get("calibrations", []):
            c.pop("variants", None)
            c.pop("variant_transfer_lines", None)
    if version < 16:
        _drop(doc, "flat")
    if version < 20:
        _drop(doc, "dry_bytes_min")
    if version < 17:
        for s in doc.get("structures", {}).values():
            for part in (s, s.get("tile_working_set", {})):
                for name in est.HIDDEN_FACTORS:
                    if isinstance(part.get(name), list):
                        part[name] = max(part[name])
    if version < 18:
        for c in doc.get("calibrations", []):
            c.pop("first_call_bytes", None)
    return doc


SCHEMA18_LINES = Path(__file__).parent / "data" / "schema18_lines.json"


def with_schema18_lines(doc: dict) -> dict:
    """``doc`` relabelled as a file of schema 18 (:func:`as_schema`), in place, with LTX-Video 0.9.5's untiled bf16
    decode line without AMX as schema 18's fit gave it (``tests/data/schema18_lines.json``, from the committed file
    of 3566596): 3 points where its 216 MiB weight copy, added to the dry run, set the demand, a nearly flat line
    that the live tensors' floor prices at large requests. From schema 19 that line is in the call peak and follows
    its dry run; the tests of the floor, which files of 18 and older still need, take this one."""
    as_schema(doc, 18)
    lines = json.loads(SCHEMA18_LINES.read_text())["lines"]
    for c in doc["calibrations"]:
        c["architectures"].update(lines.get(c["calibration"], {}))
    return doc


def scale_slope(line: dict, factor: float) -> None:
    """A calibration line's ``dry_factor`` times ``factor``, in place, with its flat branch's (schema 16): the
    lower of the two prices, so a line changed without its branch may price as before."""
    for terms in (line, line.get("flat", {})):
        if terms:
            terms["dry_factor"] *= factor


def _drop(node: object, name: str) -> None:
    """Every field ``name`` under ``node`` (a ``flat`` branch of schema 16, a ``dry_bytes_min`` of 20, a
    ``single_frame_dry_max`` of 23), removed in place."""
    if isinstance(node, dict):
        node.pop(name, None)
        for v in node.values():
            _drop(v, name)
    elif isinstance(node, list):
        for v in node:
            _drop(v, name)


FP32_VIDEO_DECODE = "conv3d/onednn/glibc-fixed/fp32/linux/decode/untiled"


def unmeasured(doc: dict, arch: str = "cogvideox", calibration: str = FP32_VIDEO_DECODE) -> dict:
    """``doc`` (a coefficient document, in place) as if ``arch`` had not been measured on ``calibration``: its own,
    transfer and variant lines there gone, so a request of it is priced as a transfer from the others (CogVideoX's
    fp32 decode was such a transfer until campaign 37 measured it; the class line and the other lines keep its
    points, which the tests of a transfer's arithmetic do not read)."""
    (c,) = [c for c in doc["calibrations"] if c["calibration"] == calibration]
    for field in ("architectures", "transfer_lines", "variants", "variant_transfer_lines"):
        for name in [n for n in c.get(field, {}) if n.split("/")[0] == arch]:
            del c[field][name]
    return doc
