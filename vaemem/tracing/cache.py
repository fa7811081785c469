"""The committed dry-run cache (``fits/traces.json``): dry-run peaks keyed by :attr:`TraceSpec.key`.

A dry run is exact for a given torch and diffusers, so the cache records the versions its entries came from and a
SHA-256 of its canonical entries; ``vaemem fit --check`` verifies both, and a test marked slow re-runs a sample.
Deterministic bytes (sorted keys, no timings), written atomically.

    {"schema_version": 1, "torch_version": "2.13.0+cpu", "diffusers_version": "0.42.1",
     "entries_sha256": "...", "entries": {KEY: {"spec": {...}, "peak_bytes": N, "output_bytes": N,
                                                "input_bytes": N, "peak_module": "...",
                                                "attention_peak_bytes": N (math-path entries only),
                                                "split_convs": [[B, C, T, H, W, kernel, out, live], ...]
                                                (where any ran),
                                                "conv_inputs": [[weight elements, rank, in channels, kernel volume,
                                                                 elements, always, columns, channels-last,
                                                                 fewest elements, their columns, live bytes,
                                                                 live bytes at the fewest], ...]
                                                (fp32, untiled, fused entries),
                                                "onednn_peak_bytes": N (untiled unsliced entries),
                                                "onednn_rule": N (theirs and the conv_inputs': the rules of
                                                oneDNN's buffers the oneDNN peaks and live bytes were counted
                                                by; absent, 1: re-run),
                                                "onednn_peak_bytes_no_amx": N (those in half precision),
                                                "softmax_mask_bytes": N (math-path entries: the mask their
                                                softmax held, counted in the peaks; an entry without it is an
                                                older vaemem's, which did not count it)}}}
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from vaemem.errors import VaememError
from vaemem.files import schema_error, write_atomic
from vaemem.tracing.counter import ONEDNN_RULE
from vaemem.tracing.trace import TraceResult, TraceSpec

CACHE_SCHEMA_VERSION = 1
DEFAULT_CACHE = Path("fits/traces.json")
CONV_INPUT_FIELDS = 12  # a conv_inputs record's length
# the records of older vaemems (8: one per weight size, no input channels or kernel volume; 10: no live bytes at the
# calls): read, so that a resumed ``trace --zoo --record`` re-runs those entries (:func:`complete`), and refused by
# ``fit`` (:func:`incomplete`)
STALE_CONV_INPUT_FIELDS = (8, 10)
ENTRY_FIELDS = {"spec": dict, "peak_bytes": int, "output_bytes": int, "input_bytes": int, "peak_module": str}


def keeps_conv_inputs(spec: TraceSpec) -> bool:
    """Whether an entry of ``spec`` records its ``conv_inputs``: the fused untiled fp32 dry runs, those of the
    structures whose weight copy follows torch's fp32 oneDNN rule (:func:`vaemem.estimate.conv_transient_bytes`; a
    half-precision convolution runs on oneDNN at any size, and a tiled request is priced with the largest copy)."""
    return spec.dtype == "fp32" and spec.tile is None and spec.attention == "fused"


def keeps_onednn_peak(spec: TraceSpec) -> bool:
    """Whether an entry of ``spec`` records its ``onednn_peak_bytes``: the untiled, unsliced dry runs, whose share of
    oneDNN buffers is nearly constant over an architecture's sizes (:func:`vaemem.tracing.structure.derive`)."""
    return spec.tile is None and not spec.slicing


def keeps_no_amx_peak(spec: TraceSpec) -> bool:
    """Whether an entry of ``spec`` records its ``onednn_peak_bytes_no_amx``: the half-precision ones of
    :func:`keeps_onednn_peak` (in fp32 a CPU without AMX holds what one with AMX does)."""
    return keeps_onednn_peak(spec) and spec.dtype != "fp32"


def keeps_onednn_rule(spec: TraceSpec) -> bool:
    """Whether an entry of ``spec`` records the rules of oneDNN's buffers it was counted by (``onednn_rule``): those
    of :func:`keeps_onednn_peak` and of :func:`keeps_conv_inputs`, whose live bytes at a call follow them too."""
    return keeps_onednn_peak(spec) or keeps_conv_inputs(spec)


def complete(entry: dict[str, Any]) -> bool:
    """Whether a cached entry holds every field this vaemem records for it, its oneDNN peaks and its convolutions'
    live bytes by this vaemem's rules (``onednn_rule``, :data:`vaemem.tracing.counter.ONEDNN_RULE`; a resumed
    ``trace --zoo`` re-runs the others)."""
    spec = TraceSpec.from_dict(entry["spec"])
    if keeps_onednn_rule(spec) and entry.get("onednn_rule") != ONEDNN_RULE:
        return False
    if keeps_onednn_peak(spec) and "onednn_peak_bytes" not in entry:
        return False
    if keeps_no_amx_peak(spec) and "onednn_peak_bytes_no_amx" not in entry:
        return False
    if spec.attention == "math" and "softmax_mask_bytes" not in entry:
        return False
    return all(len(c) == CONV_INPUT_FIELDS for c in entry.get("conv_inputs", [[]])) if keeps_conv_inputs(
        spec) else True


def incomplete(doc: dict[str, Any]) -> list[str]:
    """The keys of a cache's entries that lack a record this vaemem reads (:func:`complete`)."""
    return sorted(k for k, e in doc["entries"].items() if not complete(e))


def _entries_digest(entries: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(entries, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def empty_cache(torch_version: str, diffusers_version: str) -> dict[str, Any]:
    return {"schema_version": CACHE_SCHEMA_VERSION, "torch_version": torch_version,
            "diffusers_version": diffusers_version, "entries": {}, "entries_sha256": _entries_digest({})}


def read_cache(path: str | Path) -> dict[str, Any]:
    """The cache at ``path``, validated: schema, versions, every entry's fields and types, and the digest."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except OSError as e:
        raise VaememError(f"cannot read dry-run cache {path}: {e.strerror}") from None
    except ValueError as e:
        raise VaememError(f"{path}: not valid JSON: {e}") from None
    if not isinstance(doc, dict) or type(doc.get("schema_version")) is not int:
        raise VaememError(f"{path}: no integer schema_version: not a vaemem dry-run cache")
    wrong = schema_error(doc["schema_version"], (CACHE_SCHEMA_VERSION,))
    if wrong:
        if "entries" not in doc:  # every cache has held its entries: another file of ours (a coefficient file) is
            # not a newer cache to upgrade vaemem for
            raise VaememError(f"{path}: not a vaemem dry-run cache (it has no entries): `vaemem trace --zoo --record "
                              f"FILE` writes one")
        raise VaememError(f"{path}: {wrong}")
    for field in ("torch_version", "diffusers_version", "entries_sha256"):
        if not isinstance(doc.get(field), str):
            raise VaememError(f"{path}: {field} missing or not a string")
    entries = doc.get("entries")
    if not isinstance(entries, dict):
        raise VaememError(f"{path}: entries missing or not an object")
    for key, e in entries.items():
        if not isinstance(e, dict):
            raise VaememError(f"{path}: entry {key}: not an object")
        for field, kind in ENTRY_FIELDS.items():
            if not isinstance(e.get(field), kind) or isinstance(e.get(field), bool):
                raise VaememError(f"{path}: entry {key}: {field} missing or not {kind.__name__}")
        if e["spec"].get("attention") == "math" and (not isinstance(e.get("attention_peak_bytes"), int)
                                                       or isinstance(e.get("attention_peak_bytes"), bool)):
            raise VaememError(f"{path}: entry {key}: a math-path entry needs an integer attention_peak_bytes")
        calls = e.get("split_convs", [])
        if not isinstance(calls, list) or not all(
                isinstance(c, list) and len(c) == 8 and all(isinstance(x, int) and not isinstance(x, bool) and x > 0
                                                            for x in c) for c in calls):
            raise VaememError(f"{path}: entry {key}: split_convs must be lists of 8 positive integers")
        convs = e.get("conv_inputs", [])
        if isinstance(convs, list) and convs and all(
                isinstance(c, list) and len(c) in STALE_CONV_INPUT_FIELDS
                and all(isinstance(x, int) and not isinstance(x, bool) for x in c) for c in convs):
            pass  # an older vaemem's records: kept until re-run, never read
        elif not isinstance(convs, list) or not all(
                isinstance(c, list) and len(c) == CONV_INPUT_FIELDS
                and all(isinstance(x, int) and not isinstance(x, bool) for x in c)
                and c[0] > 0 and c[1] in (3, 4, 5) and c[2] > 0 and c[3] > 0 and c[0] % (c[2] * c[3]) == 0
                and c[4] > 0 and c[5] in (0, 1) and c[6] >= 0 and c[7] in (0, 1)
                and 0 < c[8] <= c[4] and 0 <= c[9] <= c[6] and 0 < c[11] <= c[10] for c in convs):
            raise VaememError(f"{path}: entry {key}: conv_inputs must be lists of [weight elements, rank 3-5, input "
                              f"channels and kernel volume (positive, dividing the weight), positive elements, 0 or "
                              f"1, im2col elements >= 0, channels-last 0 or 1, the fewest elements (positive, at "
                              f"most the most), their im2col elements (at most the most), the most bytes live at a "
                              f"call (positive), the most at a call of the fewest (positive, at most the most)]")
        elif len({tuple(c[:4]) for c in convs}) != len(convs):
            raise VaememError(f"{path}: entry {key}: conv_inputs holds two records of one convolution weight shape")
        mask = e.get("softmax_mask_bytes", 0)
        if not isinstance(mask, int) or isinstance(mask, bool):
            raise VaememError(f"{path}: entry {key}: softmax_mask_bytes must be an integer")
        if min(e["peak_bytes"], e["output_bytes"], e["input_bytes"], e.get("attention_peak_bytes", 0), mask) < 0:
            raise VaememError(f"{path}: entry {key}: negative bytes")
        rule = e.get("onednn_rule", 1)
        if not isinstance(rule, int) or isinstance(rule, bool) or rule < 1:
            raise VaememError(f"{path}: entry {key}: onednn_rule must be a positive integer")
        if rule > ONEDNN_RULE:
            raise VaememError(f"{path}: entry {key}: its oneDNN buffers are of rule {rule}, newer than this vaemem's "
                              f"({ONEDNN_RULE}); upgrade vaemem")
        for field in ("onednn_peak_bytes", "onednn_peak_bytes_no_amx"):
            hidden = e.get(field, e["peak_bytes"])
            if not isinstance(hidden, int) or isinstance(hidden, bool) or hidden < e["peak_bytes"]:
                raise VaememError(f"{path}: entry {key}: {field} must be an integer at least its peak_bytes")
        try:
            spec = TraceSpec.from_dict(e["spec"])
        except TypeError as err:
            raise VaememError(f"{path}: entry {key}: bad spec ({err})") from None
        if spec.key != key:
            raise VaememError(f"{path}: entry {key}: its spec has key {spec.key}")
    if _entries_digest(entries) != doc["entries_sha256"]:
        raise VaememError(f"{path}: entries_sha256 does not match its entries (edited by hand?); re-run "
                          f"`vaemem trace --record` for them")
    return doc


def dumps(doc: dict[str, Any]) -> str:
    doc = {**doc, "entries_sha256": _entries_digest(doc["entries"])}
    return json.dumps(doc, sort_keys=True, indent=1) + "\n"


def record(path: str | Path, results: Iterable[TraceResult], doc: dict[str, Any] | None = None) -> dict[str, Any]:
    """Merge ``results`` into the cache at ``path`` (created if absent) and return it. ``doc`` is the cache as a
    previous call returned it, so a loop of calls reads the file once. Results of another torch or diffusers
    than the cache's are refused: one cache, one pair of versions."""
    results = list(results)
    path = Path(path)
    if not results:
        raise VaememError("nothing to record")
    tv, dv = results[0].torch_version, results[0].diffusers_version
    if doc is None:
        doc = read_cache(path) if path.exists() else empty_cache(tv, dv)
    for r in results:
        if (r.torch_version, r.diffusers_version) != (doc["torch_version"], doc["diffusers_version"]):
            raise VaememError(f"{path} holds dry runs of torch {doc['torch_version']} / diffusers "
                              f"{doc['diffusers_version']}; this is torch {r.torch_version} / diffusers "
                              f"{r.diffusers_version}: write a cache of its own")
        doc["entries"][r.spec.key] = {"spec": r.spec.to_dict(), "peak_bytes": r.peak_bytes,
                                      "output_bytes": r.output_bytes, "input_bytes": r.input_bytes,
                                      "peak_module": r.peak_module}
        if r.spec.attention == "math":  # the one path whose structure is the attention modules' peak
            doc["entries"][r.spec.key]["attention_peak_bytes"] = r.attention_peak_bytes
            doc["entries"][r.spec.key]["softmax_mask_bytes"] = r.softmax_mask_bytes
        if r.split_convs:
            doc["entries"][r.spec.key]["split_convs"] = [list(c) for c in r.split_convs]
        if keeps_conv_inputs(r.spec):
            doc["entries"][r.spec.key]["conv_inputs"] = [list(c) for c in r.conv_inputs]
        if keeps_onednn_peak(r.spec):
            doc["entries"][r.spec.key]["onednn_peak_bytes"] = r.onednn_peak_bytes
        if keeps_onednn_rule(r.spec):
            doc["entries"][r.spec.key]["onednn_rule"] = ONEDNN_RULE
        if keeps_no_amx_peak(r.spec):
            doc["entries"][r.spec.key]["onednn_peak_bytes_no_amx"] = r.onednn_peak_bytes_no_amx
    doc["entries_sha256"] = _entries_digest(doc["entries"])  # the doc returned is read_cache's, digest current
    write_atomic(path, dumps(doc))
    return doc


def keep_only(path: str | Path, keys: set[str]) -> None:
    """Drop every entry of the cache at ``path`` whose key is not in ``keys``."""
    doc = read_cache(path)
    kept = {k: v for k, v in doc["entries"].items() if k in keys}
    if len(kept) != len(doc["entries"]):
        write_atomic(path, dumps({**doc, "entries": kept}))


def check_versions(doc: dict[str, Any]) -> list[str]:
    """Differences between the cache's versions and the installed torch and diffusers (imports them)."""
    import diffusers
    import torch

    out = []
    if doc["torch_version"] != torch.__version__:
        out.append(f"dry runs are of torch {doc['torch_version']}, installed is {torch.__version__}")
    if doc["diffusers_version"] != diffusers.__version__:
        out.append(f"dry runs are of diffusers {doc['diffusers_version']}, installed is {diffusers.__version__}")
    return out
