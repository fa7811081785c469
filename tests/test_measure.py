"""Points, probes, allocators, launchers and the sweep runner."""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from conftest import FakeLauncher, descendants
from vaemem.errors import VaememError
from vaemem.measuring.plumbing import allocators
from vaemem.measuring.plumbing.launcher import ForkLauncher, SpawnLauncher
from vaemem.measuring.point import Point, build_grid, parse_res, parse_shard, shard, validate
from vaemem.measuring.child.probes import CpuProbe, CudaProbe, demand_from
from vaemem.measuring.parent.runner import measure, recorded_runs
from vaemem.measuring.parent.store import append_record, iter_records, load_measurements

MIB = 1024 * 1024


# ---- points -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("point,message", [
    (Point("nope", "decode", "fp32", 64, 64), "choose one of: cogvideox, cogview4"),
    (Point("tiny-kl", "blur", "fp32", 64, 64), "choose one of: decode, encode"),
    (Point("tiny-kl", "decode", "fp8", 64, 64), "choose one of: fp16, bf16, fp32"),
    (Point("tiny-kl", "decode", "fp32", 66, 64), "multiples of 4"),
    (Point("tiny-kl", "decode", "fp32", 0, 64), "positive"),
    (Point("tiny-kl", "decode", "fp32", 64, 64, batch=0), "batch must be a positive"),
    (Point("tiny-kl", "decode", "fp32", 64, 64, frames=5), "image model: frames apply only to"),
    (Point("tiny-wan", "decode", "fp32", 64, 64, frames=4), r"1 \+ 4k"),
    (Point("tiny-kl", "decode", "fp32", 64, 64, tile=64), "no tiling would happen"),
    (Point("tiny-kl", "decode", "fp32", 64, 64, tile=30), "positive multiple of 4"),
    (Point("tiny-kl", "decode", "fp32", 64, 64, allocator="native"), "choose one of: glibc, glibc-fixed"),
    (Point("tiny-kl", "decode", "fp32", 64, 64, allocator="glibc", device="cuda"), "cudaMallocAsync"),
    (Point("tiny-kl", "decode", "fp32", 64, 64, device="tpu"), "bad device"),
    # no CUDA allocator setting reaches MPS: `plan --device mps --allocator system` offered cudaMallocAsync
    (Point("tiny-kl", "decode", "fp32", 64, 64, allocator="cudaMallocAsync", device="mps"), "choose one of: native$"),
    (Point("minimax-h3", "decode", "fp32", 64, 64, frames=17), "cannot decode: MiniMax-H3's decoder is a ViT"),
    (Point("tiny-kl", "decode", "fp32", 64, 64, overlap=0.5), "applies to tiled points only"),
    (Point("tiny-kl", "decode", "fp32", 128, 128, tile=64, overlap=1.0), r"a fraction from 0 to 0.5"),
    (Point("tiny-kl", "decode", "fp32", 128, 128, tile=64, overlap=0.6), r"a fraction from 0 to 0.5"),
    (Point("tiny-kl", "decode", "fp32", 64, 64, slicing=True), "needs batch > 1"),
    (Point("tiny-kl", "decode", "fp32", 64, 64, batch=2, slicing="yes"), "true or false"),
    (Point("tiny-kl", "decode", "fp32", 64, 64, attention="flash"), "choose one of: fused, math"),
    (Point("tiny-kl", "decode", "fp32", 64, 64, conv3d="decomposed"), "applies to the causal conv3d of Wan"),
])
def test_invalid_points_are_refused_naming_the_choices(point, message):
    with pytest.raises(VaememError, match=message):
        validate(point)


def test_a_point_and_a_priced_request_refuse_the_same_sizes_and_tiles_alike():
    """One owner of the size and tile rules: a measurement point is refused exactly where the estimator refuses
    the same request (integer sizes and tiles), with the same message."""
    from vaemem import estimate as est

    for w, h, tile in [(w, h, t) for w in (500, 512, 1024) for h in (512, 768)
                       for t in (None, -8, 0, 8, 12, 256, 260, 384, 512, 768, 1024)]:  # tiles the structure prices
        try:
            validate(Point("sd15", "decode", "fp32", w, h, tile=tile))
            measured = None
        except VaememError as e:
            measured = str(e)
        try:
            est.working_memory_bytes("sd15", "decode", w, h, tile=tile, dtype="fp32", backend="onednn",
                                     allocator="glibc-fixed", os="linux")
            priced = None
        except ValueError as e:
            priced = str(e)
        assert measured == priced, (w, h, tile)


def test_parse_res_and_shard():
    assert parse_res("512") == (512, 512) and parse_res("768x448") == (768, 448)
    for bad in ("", "x", "512x", "-5", "1.5"):
        with pytest.raises(VaememError):
            parse_res(bad)
    assert parse_shard("2/4") == (2, 4)
    for bad in ("0/4", "5/4", "a/b", "2"):
        with pytest.raises(VaememError):
            parse_shard(bad)


def test_grid_is_deduplicated_sorted_by_size_and_video_frames_default():
    pts = build_grid(["tiny-kl"], ["decode"], ["fp32"], ["128", "64", "64x64"], allocators=["glibc"])
    assert [p.pixels for p in pts] == [64 * 64, 128 * 128]
    assert build_grid(["tiny-wan"], ["encode"], ["fp32"], ["64"])[0].frames == 17


def test_shards_partition_the_grid_stably():
    pts = build_grid(["tiny-kl", "tiny-wan"], ["decode", "encode"], ["fp32", "bf16"],
                     ["64", "128", "96x64", "256"], frames=[5])
    parts = [shard(pts, k, 3) for k in (1, 2, 3)]
    assert sorted(p.key for part in parts for p in part) == sorted(p.key for p in pts)
    assert all(part for part in parts)
    assert shard(list(reversed(pts)), 2, 3) == list(reversed(parts[1]))  # independent of grid order


def test_variant_fields_extend_the_key_and_defaults_keep_the_old_one():
    old = "tiny-kl/decode/fp32/64x64/b2/f1/t0/glibc/cpu"
    assert Point("tiny-kl", "decode", "fp32", 64, 64, batch=2).key == old
    v = Point("tiny-kl", "decode", "fp32", 128, 128, batch=2, tile=64, overlap=0.5, slicing=True, attention="math")
    assert v.key == "tiny-kl/decode/fp32/128x128/b2/f1/t64/glibc/cpu/o0.5/sliced/math"
    assert Point.from_dict({k: x for k, x in v.to_dict().items()}) == v
    pts = build_grid(["tiny-kl"], ["decode"], ["fp32"], ["128"], [1, 2], tiles=[None, 64], overlaps=[0.5],
                     slicing=[True])
    assert sorted((p.batch, p.tile or 0, p.overlap) for p in pts) == [(2, 0, 0.25), (2, 64, 0.5)]  # no sliced b1
    assert Point("tiny-wan", "decode", "fp32", 64, 64, frames=5, conv3d="decomposed").key.endswith("/decomposed")


def test_a_variant_point_runs_in_a_real_child_as_its_dry_run_says(tmp_path):
    """Sliced, math-path and decomposed points run with their variant applied (the dry runs differ, so the
    demands do): the record carries the fields."""
    from vaemem.tracing.trace import TraceSpec, trace

    pts = [validate(Point("tiny-kl", "decode", "fp32", 128, 128, batch=2, allocator="glibc-fixed", **v))
           for v in ({}, {"slicing": True}, {"attention": "math"})]
    recs = measure(pts, tmp_path / "m.jsonl", rig="t", runs=1, launcher_factory=lambda n: ForkLauncher())
    assert [r["status"] for r in recs] == ["ok"] * 3, [r.get("error") for r in recs]
    by = {(r["slicing"], r["attention"]): r["demand_bytes"] for r in recs}
    dry = {k: trace(TraceSpec("tiny-kl", "decode", "fp32", 128, 128, batch=2, slicing=k[0], attention=k[1]))
           .peak_bytes for k in by}
    assert dry[(True, "fused")] < dry[(False, "fused")] < dry[(False, "math")]
    assert by[(True, "fused")] < by[(False, "fused")] < by[(False, "math")]


def test_point_key_ignores_device_index_only():
    a = Point("tiny-kl", "decode", "fp32", 64, 64, allocator="native", device="cuda:0")
    b = Point("tiny-kl", "decode", "fp32", 64, 64, allocator="native", device="cuda:1")
    assert a.key == b.key and a.key != Point("tiny-kl", "decode", "fp32", 64, 64).key


# ---- allocators -----------------------------------------------------------------------------------------------

def test_host_allocator_settings_never_leak_into_a_point():
    host = {"PATH": "/bin", "PYTORCH_ALLOC_CONF": "expandable_segments:True", "PYTORCH_CUDA_ALLOC_CONF": "x",
            "PYTORCH_HIP_ALLOC_CONF": "y", "MALLOC_ARENA_MAX": "2"}
    assert allocators.child_env("native", host) == {"PATH": "/bin"}
    assert allocators.child_env("glibc", host) == {"PATH": "/bin"}
    fixed = allocators.child_env("glibc-fixed", host)
    assert fixed["MALLOC_MMAP_THRESHOLD_"] == "65536" and fixed["MALLOC_TRIM_THRESHOLD_"] == "0"
    asyn = allocators.child_env("cudaMallocAsync", host)
    assert {asyn[v] for v in allocators.TORCH_ALLOC_VARS} == {"backend:cudaMallocAsync"}
    assert allocators.late_env("expandable-off")["PYTORCH_ALLOC_CONF"] == "expandable_segments:False"
    # glibc reads MALLOC_* at start (needs its own fork helper); torch reads its variable at first device use
    assert allocators.startup_env("cudaMallocAsync") == {} and allocators.late_env("glibc-fixed") == {}


def test_the_allocator_check_tells_expandable_from_expandable_off():
    m = allocators.allocator_mismatch
    assert m("expandable", "native", "expandable_segments:True") is None
    assert m("expandable-off", "native", "expandable_segments:False") is None
    assert "expandable_segments:True" in m("expandable-off", "native", "expandable_segments:True")
    assert m("expandable", "native", "") is not None  # torch reports no setting: it did not take
    assert "backend cudaMallocAsync" in m("native", "cudaMallocAsync", "")
    assert m("expandable", "native", None) is None  # an old torch that cannot say: nothing to compare


def test_the_child_reads_the_allocator_settings_from_torch():
    """rig_info on a fake CUDA torch records get_allocator_backend() and the parsed settings."""
    from types import SimpleNamespace

    from vaemem.measuring.child.rig import rig_info

    props = SimpleNamespace(name="Fake GPU", total_memory=1 << 30)
    cuda = SimpleNamespace(is_available=lambda: True, get_device_properties=lambda i: props,
                           memory=SimpleNamespace(get_allocator_backend=lambda: "native"))
    fake = SimpleNamespace(cuda=cuda, version=SimpleNamespace(cuda="12.8", hip=None), __version__="2.13.0",
                           backends=SimpleNamespace(cudnn=SimpleNamespace(is_available=lambda: True,
                                                                          version=lambda: 90100)),
                           _C=SimpleNamespace(_accelerator_getAllocatorSettings=lambda: "expandable_segments:False"),
                           get_num_threads=lambda: 4)
    info = rig_info(fake, "cuda:0", "fp16")
    assert info["allocator_backend_seen"] == "native"
    assert info["allocator_settings_seen"] == "expandable_segments:False"
    assert allocators.allocator_mismatch("expandable", info["allocator_backend_seen"],
                                         info["allocator_settings_seen"]) is not None


def test_the_child_environment_is_an_allow_list():
    host = {"PATH": "/bin", "HOME": "/h", "GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=1", "LD_PRELOAD": "x.so",
            "PYTORCH_NO_CUDA_MEMORY_CACHING_ALLOC_CONF": "1", "CUDA_VISIBLE_DEVICES": "1", "HIP_VISIBLE_DEVICES": "0",
            "MIOPEN_USER_DB_PATH": "/db", "CUBLAS_WORKSPACE_CONFIG": ":4096:8", "SYSTEMROOT": "C:\\Windows",
            "SOME_PLUGIN_SETTING": "1", "OMP_NUM_THREADS": "2"}
    env = allocators.child_env("glibc", host)
    assert set(env) == {"PATH", "HOME", "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "MIOPEN_USER_DB_PATH",
                        "CUBLAS_WORKSPACE_CONFIG", "SYSTEMROOT", "OMP_NUM_THREADS"}
    assert allocators.memory_env_seen(env) == {"CUBLAS_WORKSPACE_CONFIG": ":4096:8",
                                               "MIOPEN_USER_DB_PATH": "/db", "OMP_NUM_THREADS": "2"}


# ---- probes -----------------------------------------------------------------------------------------------------

def test_cpu_probe_known_answer_in_process():
    import gc

    import torch

    gc.collect()  # what earlier tests in this process left for the collector must not be freed inside the window
    probe = CpuProbe()
    probe.start()
    block = torch.ones(64 * MIB // 4)  # 64 MiB, touched
    readings = probe.stop()
    del block
    demand, deltas = demand_from(readings)
    assert 64 * MIB <= demand < 72 * MIB, demand / MIB
    # the block is anonymous memory, no file's pages: the split the probe keeps beside the demand
    assert readings["after_rss_anon_bytes"] - readings["baseline_rss_anon_bytes"] >= 64 * MIB
    assert abs(readings["after_rss_file_bytes"] - readings["baseline_rss_file_bytes"]) < 8 * MIB


def test_cpu_probe_reads_proc_status_fields(tmp_path):
    (tmp_path / "clear_refs").write_text("")
    (tmp_path / "status").write_text("VmPeak:\t 9 kB\nVmHWM:\t    3000 kB\nVmRSS:\t    1000 kB\n")
    probe = CpuProbe(tmp_path)
    probe.start()
    assert (tmp_path / "clear_refs").read_text() == "5"
    (tmp_path / "status").write_text("VmHWM:\t    5000 kB\nVmRSS:\t    2000 kB\n")
    r = probe.stop()
    assert r == {"baseline_rss_bytes": 1000 * 1024, "peak_rss_bytes": 5000 * 1024, "after_rss_bytes": 2000 * 1024}


def test_cpu_probe_keeps_file_and_anonymous_resident_sizes_beside_the_demand(tmp_path):
    (tmp_path / "clear_refs").write_text("")
    (tmp_path / "status").write_text("VmHWM:\t 1000 kB\nVmRSS:\t 1000 kB\nRssAnon:\t 600 kB\nRssFile:\t 400 kB\n")
    probe = CpuProbe(tmp_path)
    probe.start()
    (tmp_path / "status").write_text("VmHWM:\t 5000 kB\nVmRSS:\t 2000 kB\nRssAnon:\t 1100 kB\nRssFile:\t 900 kB\n")
    r = probe.stop()
    assert r == {"baseline_rss_bytes": 1000 * 1024, "peak_rss_bytes": 5000 * 1024, "after_rss_bytes": 2000 * 1024,
                 "baseline_rss_file_bytes": 400 * 1024, "after_rss_file_bytes": 900 * 1024,
                 "baseline_rss_anon_bytes": 600 * 1024, "after_rss_anon_bytes": 1100 * 1024}
    assert demand_from(r) == (4000 * 1024, {"rss": 4000 * 1024})  # no peak: never part of the demand


def test_cpu_probe_without_proc_is_a_clear_error(tmp_path):
    with pytest.raises(VaememError, match="clear_refs"):
        CpuProbe(tmp_path / "missing").start()


class FakeCuda:
    """torch.cuda's memory API over a scripted allocator: `phase` moves from baseline to op to after."""

    def __init__(self, transient_driver_peak: int = 0) -> None:
        self.total, self.phase, self.transient = 80 * 1024 * MIB, "baseline", transient_driver_peak
        self.peaks_reset = False
        self.calls: list[str] = []

    state = {"baseline": (1000 * MIB, 1200 * MIB, 1100 * MIB), "op": (1000 * MIB, 3000 * MIB, 2600 * MIB),
             "after": (1000 * MIB, 3000 * MIB, 3100 * MIB)}

    def synchronize(self, i): self.calls.append("sync")

    def reset_peak_memory_stats(self, i): self.peaks_reset = True

    def memory_allocated(self, i): return self.state[self.phase][0]

    def memory_reserved(self, i): return self.state[self.phase][1]

    def max_memory_allocated(self, i): return 2500 * MIB

    def max_memory_reserved(self, i): return 3000 * MIB

    def mem_get_info(self, i):
        used = self.state[self.phase][2] + (self.transient if self.phase == "op" else 0)
        return self.total - used, self.total


def test_cuda_probe_known_answer_with_fake_device():
    api = FakeCuda(transient_driver_peak=2000 * MIB)
    probe = CudaProbe(api, 0)
    probe.start()
    assert api.peaks_reset
    api.phase = "op"
    time.sleep(0.05)  # the sampler thread sees the transient driver peak that no counter keeps
    api.phase = "after"
    r = probe.stop()
    demand, deltas = demand_from(r)
    assert deltas == {"driver": 3500 * MIB, "reserved": 1800 * MIB, "allocated": 1500 * MIB}
    assert demand == 3500 * MIB
    assert r["after_driver_bytes"] == 3100 * MIB


def test_cuda_probe_with_cudamallocasync_zero_stats_falls_back_to_driver():
    api = FakeCuda()
    api.max_memory_reserved = lambda i: 0  # cudaMallocAsync leaves some stats at zero
    probe = CudaProbe(api, 0)
    probe.start()
    api.phase = "after"
    demand, deltas = demand_from(probe.stop())
    assert deltas["reserved"] == 0 and demand == deltas["driver"] == 2000 * MIB


# ---- the store ----------------------------------------------------------------------------------------------------

def _writer(path: str, tag: int, n: int) -> None:
    for i in range(n):
        append_record(path, {"schema_version": 1, "tag": tag, "i": i, "pad": "x" * 5000})


@pytest.mark.portable
def test_concurrent_writers_leave_only_whole_lines(tmp_path):
    path = tmp_path / "m.jsonl"
    procs = [multiprocessing.get_context("spawn").Process(target=_writer, args=(str(path), t, 150)) for t in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    records = [r for _, _, r in iter_records([path])]
    assert len(records) == 450
    assert {(r["tag"], r["i"]) for r in records} == {(t, i) for t in range(3) for i in range(150)}


@pytest.mark.portable
def test_reader_names_file_and_line_of_bad_or_newer_lines(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"schema_version": 1}\n{"schema_version": 2}\n')
    with pytest.raises(VaememError, match=r"m.jsonl:2: schema_version 2 is newer"):
        list(iter_records([path]))
    path.write_text('{"schema_version": 1}\n{"schema_ver')
    # with its remedy: a resumed sweep stopped there with no way forward
    with pytest.raises(VaememError, match=r"m.jsonl:2: truncated line .*; delete or repair that line \(fit, report"):
        list(iter_records([path]))
    path.write_text('{"schema_version": 1}\nnot json\n{"no": 1}\n')
    with pytest.raises(VaememError, match=r"m.jsonl:2: malformed JSON"):
        list(iter_records([path]))
    bad: list = []
    assert len(list(iter_records([path], skip_bad=True, bad=bad))) == 1
    assert [b.line for b in bad] == [2, 3]
    # JSON's true is Python's 1, this schema: it was read as one
    path.write_text('{"schema_version": 1}\n{"schema_version": true}\n')
    with pytest.raises(VaememError, match=r"m.jsonl:2: no integer schema_version \(got True\)"):
        list(iter_records([path]))


@pytest.mark.parametrize("version,reads,said", [
    (1, (1,), None), (2, (1, 2), None),
    (True, (1,), "no integer schema_version (got True)"), ("1", (1,), "no integer schema_version (got '1')"),
    (3, (1, 2), "schema_version 3 is newer than this vaemem reads (2); upgrade vaemem"),
    (0, (1, 2), "schema_version 0 is not one this vaemem reads (1, 2)"),
])
def test_one_schema_version_rule_for_the_files_vaemem_reads(version, reads, said):
    from vaemem.files import schema_error

    assert schema_error(version, reads) == said


def test_json_true_is_no_schema_of_the_dry_run_cache_nor_the_exceptions_file(tmp_path):
    """Both read ``"schema_version": true`` as schema 1 before (Python's True == 1)."""
    from vaemem.fit.coefficients import load_exceptions
    from vaemem.tracing.cache import read_cache

    path = tmp_path / "f.json"
    path.write_text('{"schema_version": true, "groups": {}}')
    with pytest.raises(VaememError, match=r"f.json: no integer schema_version \(got True\)"):
        load_exceptions(path)
    path.write_text('{"schema_version": true, "entries": {}}')
    with pytest.raises(VaememError, match=r"f.json: no integer schema_version: not a vaemem dry-run cache"):
        read_cache(path)


# ---- the runner (fake launcher) --------------------------------------------------------------------------------

def _pts(*sizes, model="tiny-kl"):
    return [validate(Point(model, "decode", "fp32", s, s)) for s in sizes]


@pytest.mark.portable
def test_runner_writes_every_run_and_resumes(tmp_path):
    out = tmp_path / "r.jsonl"
    fake = FakeLauncher()
    recs = measure(_pts(64, 128), out, rig="r", runs=2, launcher_factory=lambda n: fake)
    assert [(r["width"], r["run"]) for r in recs] == [(64, 0), (128, 0), (64, 1), (128, 1)]
    assert recs[0]["demand_bytes"] == 64 * 64 * 100 and recs[0]["schema_version"] == 1
    assert len(out.read_text().splitlines()) == 4
    assert measure(_pts(64, 128), out, rig="r", runs=2, launcher_factory=lambda n: fake) == []  # resume
    assert len(measure(_pts(64, 128), out, rig="r", runs=3, launcher_factory=lambda n: fake)) == 2
    assert len(measure(_pts(64), out, rig="other", runs=1, launcher_factory=lambda n: fake)) == 1  # other rig
    assert len(measure(_pts(64), out, rig="r", runs=1, force=True, launcher_factory=lambda n: fake)) == 1
    assert recorded_runs(out, "r") == {(p.key, r) for p in _pts(64, 128) for r in range(3)}


def test_an_oom_of_the_whole_batch_does_not_skip_its_sliced_twin(tmp_path):
    """Slicing exists for the batch that does not fit whole: an OOM of one variant skips only its own larger
    sizes."""
    pts = build_grid(["tiny-kl"], ["decode"], ["fp32"], ["64", "128"], [2], slicing=[False, True],
                     allocators=["glibc"])
    whole64 = next(p for p in pts if not p.slicing and p.width == 64)
    fake = FakeLauncher(fail={whole64.key: "oom"})
    recs = measure(pts, tmp_path / "r.jsonl", rig="r", runs=1, launcher_factory=lambda n: fake)
    status = {(r["slicing"], r["width"]): r["status"] for r in recs}
    assert status == {(False, 64): "oom", (False, 128): "skipped-after-oom", (True, 64): "ok", (True, 128): "ok"}


@pytest.mark.portable
def test_failures_are_records_and_larger_points_are_skipped_after_oom(tmp_path):
    pts = _pts(64, 96, 128, 160)
    fake = FakeLauncher(fail={pts[0].key: "crash", pts[1].key: "oom", pts[3].key: "timeout"})
    recs = measure(pts, tmp_path / "r.jsonl", rig="r", runs=1, launcher_factory=lambda n: fake)
    assert [r["status"] for r in recs] == ["crash", "oom", "skipped-after-oom", "skipped-after-oom"]
    assert recs[0]["exit_code"] == -11 and "Segmentation" in recs[0]["stderr_tail"]
    assert [p.width for p in fake.ran] == [64, 96]
    recs = measure(_pts(64), tmp_path / "t.jsonl", rig="r2", runs=1,
                   launcher_factory=lambda n: FakeLauncher(fail={pts[0].key: "timeout"}))
    assert recs[0]["status"] == "timeout"


def test_devices_run_one_point_per_gpu_and_keep_keys(tmp_path):
    pts = [validate(Point("tiny-kl", "decode", "fp32", s, s, allocator="native", device="cuda")) for s in (64, 128, 256)]
    made: list[FakeLauncher] = []

    def factory(name):
        made.append(FakeLauncher())
        return made[-1]

    recs = measure(pts, tmp_path / "g.jsonl", rig="g", runs=2, devices=[0, 1], launcher_factory=factory)
    assert len(recs) == 6 and len(made) == 2
    assert {r["device"] for r in recs} <= {"cuda:0", "cuda:1"}
    assert sorted(p.device for f in made for p in f.ran) and all(
        len({p.device for p in f.ran}) == 1 for f in made if f.ran)  # each launcher stays on its GPU
    assert recorded_runs(tmp_path / "g.jsonl", "g") == {(p.key, r) for p in pts for r in range(2)}
    with pytest.raises(VaememError, match="cuda points only"):
        measure(_pts(64), tmp_path / "x.jsonl", rig="g", devices=[0], launcher_factory=factory)


def test_load_measurements_flattens_nested_fields(tmp_path):
    out = tmp_path / "r.jsonl"
    measure(_pts(64, 128), out, rig="r", runs=1, launcher_factory=lambda n: FakeLauncher())
    df = load_measurements(tmp_path)
    assert len(df) == 2 and {"rig.name", "rig.conv_backend", "readings.peak_rss_bytes", "demand_bytes"} <= set(df)
    assert list(df["source_line"]) == [1, 2]


# ---- real fresh processes --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("launcher_cls", [ForkLauncher, pytest.param(SpawnLauncher, marks=pytest.mark.portable)])
def test_real_runs_are_fresh_processes(tmp_path, launcher_cls):
    pts = [validate(Point("tiny-kl", "decode", "fp32", 64, 64, allocator="glibc-fixed")),
           validate(Point("tiny-wan", "encode", "bf16", 64, 64, frames=5, allocator="glibc"))]
    runs = 2 if launcher_cls is ForkLauncher else 1  # a spawned child imports torch and diffusers afresh (7 s)
    recs = measure(pts, tmp_path / "m.jsonl", rig="t", runs=runs, launcher_factory=lambda n: launcher_cls())
    assert [r["status"] for r in recs] == ["ok"] * 2 * runs, [r.get("error") or r.get("stderr_tail") for r in recs]
    assert len({r["pid"] for r in recs}) == 2 * runs and os.getpid() not in {r["pid"] for r in recs}
    for r in recs:
        assert r["demand_bytes"] > 1 * MIB and r["output_finite"] and r["rig"]["backend"] == "cpu"
        assert r["launcher"] == launcher_cls.name
    fixed = [r for r in recs if r["allocator"] == "glibc-fixed"]
    assert fixed[0]["rig"]["allocator_env_seen"] == allocators.GLIBC_FIXED
    assert [r for r in recs if r["allocator"] == "glibc"][0]["rig"]["allocator_env_seen"] == {}


def test_host_glibc_tunables_never_reach_a_real_child(tmp_path, monkeypatch):
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.mmap_threshold=4096")
    monkeypatch.setenv("MALLOC_ARENA_MAX", "1")
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")
    pts = [validate(Point("tiny-kl", "decode", "fp32", 64, 64, allocator="glibc"))]
    (rec,) = measure(pts, tmp_path / "m.jsonl", rig="t", runs=1, launcher_factory=lambda n: ForkLauncher())
    assert rec["status"] == "ok" and rec["rig"]["allocator_env_seen"] == {}
    assert rec["rig"]["memory_env_seen"] == {"CUBLAS_WORKSPACE_CONFIG": ":16:8"}


def _kill_worker_after(delay_s: float, sig: int) -> threading.Thread:
    def killer():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            time.sleep(0.2)
            workers = [p for p in descendants(os.getpid())
                       if b"vaemem.measuring.plumbing.forkserver" not in Path(f"/proc/{p}/cmdline").read_bytes()
                       or Path(f"/proc/{p}/stat").read_text().split()[3] != str(os.getpid())]
            leaves = [p for p in workers if not descendants(p)]
            if leaves:
                time.sleep(delay_s)
                for p in leaves:
                    os.kill(p, sig)
                return

    t = threading.Thread(target=killer, daemon=True)
    t.start()
    return t


@pytest.mark.parametrize("launcher_cls", [ForkLauncher, pytest.param(SpawnLauncher, marks=pytest.mark.portable)])
def test_worker_killed_mid_run_is_recorded_and_sweep_goes_on(tmp_path, launcher_cls):
    big = validate(Point("sd15", "decode", "fp32", 1024, 1024))  # minutes on this CPU: certain to be mid-run
    small = validate(Point("tiny-kl", "decode", "fp32", 64, 64))
    launch = launcher_cls()
    if isinstance(launch, ForkLauncher):
        launch._helper("glibc")  # start the helper first so only the worker is a leaf to kill
    killer = _kill_worker_after(1.0, signal.SIGTERM)
    recs = measure([big, small], tmp_path / "k.jsonl", rig="t", runs=1, launcher_factory=lambda n: launch)
    killer.join()
    assert recs[0]["status"] == "crash" and recs[0]["exit_code"] == -signal.SIGTERM
    assert recs[1]["status"] == "ok"


@pytest.mark.parametrize("launcher", ["fork", pytest.param("spawn", marks=pytest.mark.portable)])
def test_worker_past_its_timeout_is_killed_and_recorded(tmp_path, launcher):
    big = validate(Point("sd15", "decode", "fp32", 1024, 1024))
    t0 = time.monotonic()
    recs = measure([big], tmp_path / "t.jsonl", rig="t", runs=1, timeout_s=3, launcher=launcher)
    assert recs[0]["status"] == "timeout" and recs[0]["exit_code"] == -signal.SIGKILL
    assert time.monotonic() - t0 < 60
    assert json.loads((tmp_path / "t.jsonl").read_text())["status"] == "timeout"


@pytest.mark.portable
def test_python_api_under_the_cli(tmp_path):
    import vaemem

    pts = vaemem.grid(["tiny-kl"], ["decode"], ["fp32"], ["64", "96x64"], allocators=["glibc-fixed"])
    recs = vaemem.measure(pts, tmp_path / "m.jsonl", rig="api", runs=1, launcher_factory=lambda n: FakeLauncher())
    df = vaemem.load_measurements(tmp_path / "m.jsonl")
    assert len(recs) == len(df) == 2 and set(df["width"]) == {64, 96}


# ---- the parent owns the classification (issue 11) ----------------------------------------------------------

from vaemem.measuring.plumbing.launcher import RunOutcome  # noqa: E402
from vaemem.measuring.parent.runner import Task, classify, make_record, oom_kill_count  # noqa: E402

_OK = {"status": "ok", "demand_bytes": 123, "rig": {}}


@pytest.mark.portable
def test_a_timeout_wins_over_a_result_the_child_wrote_before_a_slow_exit():
    rec = make_record(Task(_pts(64)[0], 0), RunOutcome(dict(_OK), -9, True, "", 30.0, 1), rig="r", launcher="fork",
                      timeout_s=30.0)
    assert rec["status"] == "timeout" and rec["demand_bytes"] is None and "parent" in rec["status_evidence"]


def test_a_sigkill_without_oom_evidence_is_a_crash_and_with_it_an_oom():
    killed = RunOutcome(None, -9, False, "", 1.0, 1)
    assert classify(killed) == ("crash", "parent: child died (signal 9) with no OOM evidence")
    assert classify(killed, oom_kills=0)[0] == "crash"
    status, evidence = classify(killed, oom_kills=1)
    assert status == "oom" and "oom_kill count rose by 1" in evidence
    assert classify(RunOutcome(dict(_OK), 0, False, "", 1.0, 1)) == ("ok", "child: result, exit 0")
    # a result from a child that then died is not trusted
    assert classify(RunOutcome(dict(_OK), -11, False, "", 1.0, 1))[0] == "crash"
    # the kernel's OOM killer sends SIGKILL only: a segfault or an exit is no OOM, whatever the cgroup's count did
    # (it counts every process of the cgroup: another device's child too)
    assert classify(RunOutcome(None, -11, False, "", 1.0, 1), oom_kills=1)[0] == "crash"
    assert classify(RunOutcome(None, 3, False, "", 1.0, 1), oom_kills=1) == (
        "crash", "parent: child died (exit 3) with no OOM evidence")
    # a timeout's seconds, readable at both ends
    for wall, said in ((0.0123, "0.012"), (5.25, "5.2"), (3600.0, "3600.0")):
        assert classify(RunOutcome(None, -9, True, "", wall, 1)) == ("timeout", f"parent: no exit within {said} s, "
                                                                                 f"killed")


@pytest.mark.parametrize("result,evidence", [
    ({"status": "timeout"}, "parent: child exited 0 without a usable result (it said 'timeout', which is the "
                            "parent's to say)"),
    ({"status": "dropped-late"}, "parent: child exited 0 without a usable result (it said 'dropped-late', which "
                                 "is the parent's to say)"),
    ({"status": "sing"}, "parent: child exited 0 without a usable result"),
])
def test_a_child_says_ok_oom_or_error_only(result, evidence):
    """A status the parent gives (timeout, skipped-after-oom, dropped-late) is not the child's to claim."""
    assert classify(RunOutcome(result, 0, False, "", 1.0, 1)) == ("crash", evidence)


@pytest.mark.parametrize("demand", [None, -5, 2.5, True, 2**61])
def test_an_ok_result_without_a_usable_demand_is_recorded_as_an_error(tmp_path, demand):
    """Recorded as ok, it was a line every reader refuses: the next resume and fit stopped on it."""
    rec = make_record(Task(_pts(64)[0], 0), RunOutcome({"status": "ok", "demand_bytes": demand}, 0, False, "", 1.0,
                                                       1), rig="r", launcher="fork", timeout_s=30.0)
    assert rec["status"] == "error" and rec["demand_bytes"] is None
    assert rec["status_evidence"].startswith("parent: the child's result (exit 0) is unusable: ")
    append_record(tmp_path / "m.jsonl", rec)
    assert [r["status"] for _, _, r in iter_records([tmp_path / "m.jsonl"])] == ["error"]  # readable


def test_the_parents_fields_win_over_a_childs_result_and_a_lost_child_says_why():
    child = {**_OK, "model": "sdxl", "point_key": "x", "run": 7, "rig": {"name": "other", "cpu": "c"}}
    rec = make_record(Task(_pts(64)[0], 0), RunOutcome(child, 0, False, "", 1.0, 1), rig="r", launcher="fork",
                      timeout_s=30.0)
    assert (rec["model"], rec["point_key"], rec["run"]) == ("tiny-kl", _pts(64)[0].key, 0)
    assert rec["rig"]["name"] == "r" and rec["rig"]["cpu"] == "c" and rec["demand_bytes"] == 123
    damaged = make_record(Task(_pts(64)[0], 0), RunOutcome({**_OK, "rig": "x"}, 0, False, "", 1.0, 1), rig="r",
                          launcher="fork", timeout_s=30.0)
    assert damaged["status"] == "ok" and damaged["rig"]["name"] == "r"
    lost = RunOutcome(None, None, False, "", 1.0, 1, "the fork helper died during the run, and the parent killed "
                                                    "the child's group")
    assert classify(lost) == ("crash", f"parent: {lost.lost}")


def test_a_python_memory_error_is_an_oom():
    from vaemem.measuring.child.worker import _is_oom

    assert _is_oom(MemoryError()) and not _is_oom(ValueError("shape"))


def test_a_second_sweep_on_the_same_file_is_refused_while_the_first_runs(tmp_path):
    """Two sweeps appending to one file planned every run from the same history and ran each twice. The second is
    refused at once; another --out in the folder runs (the shards of a sweep), and the lock goes with the first."""
    from vaemem.measuring.parent.store import sweep_lock

    out = tmp_path / "r.jsonl"
    with sweep_lock(out):
        with pytest.raises(VaememError, match=f"another sweep is appending to {out} .*: let it finish, or give this "
                                              f"one another --out"):
            measure(_pts(64), out, rig="r", runs=1, launcher_factory=lambda n: FakeLauncher())
        assert not out.exists()
        (rec,) = measure(_pts(64), tmp_path / "shard.jsonl", rig="r", runs=1, launcher_factory=lambda n: FakeLauncher())
        assert rec["status"] == "ok"
    (rec,) = measure(_pts(96), out, rig="r", runs=1, launcher_factory=lambda n: FakeLauncher())
    assert rec["status"] == "ok" and [p.name for p in tmp_path.glob("*.jsonl")] != []


@pytest.mark.portable
def test_a_crash_does_not_skip_larger_points(tmp_path):
    pts = _pts(64, 96, 128)
    fake = FakeLauncher(fail={pts[0].key: "crash"})
    recs = measure(pts, tmp_path / "r.jsonl", rig="r", runs=1, launcher_factory=lambda n: fake)
    assert [r["status"] for r in recs] == ["crash", "ok", "ok"]


@pytest.mark.portable
def test_retry_failed_re_measures_crashes_timeouts_and_skips_only(tmp_path):
    pts = _pts(64, 96, 128, 160)
    out = tmp_path / "r.jsonl"
    measure(pts, out, rig="r", runs=1, launcher_factory=lambda n: FakeLauncher(
        fail={pts[0].key: "crash", pts[1].key: "oom", pts[3].key: "timeout"}))
    assert measure(pts, out, rig="r", runs=1, launcher_factory=lambda n: FakeLauncher()) == []  # a resume keeps them
    fake = FakeLauncher()
    recs = measure(pts, out, rig="r", runs=1, retry_failed=True, launcher_factory=lambda n: fake)
    assert sorted(p.width for p in fake.ran) == [64, 128, 160]  # the oom is a result, not retried
    assert all(r["status"] == "ok" for r in recs) and len(out.read_text().splitlines()) == 7  # old lines kept


def test_oom_kill_count_reads_cgroup_v1_and_v2(tmp_path):
    (tmp_path / "memory" / "a").mkdir(parents=True)
    (tmp_path / "memory" / "a" / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n")
    (tmp_path / "v1").write_text("4:memory:/a\n0::/\n")
    assert oom_kill_count(str(tmp_path / "v1"), str(tmp_path)) == 3
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "memory.events").write_text("low 0\nhigh 0\nmax 2\noom 2\noom_kill 5\n")
    (tmp_path / "v2").write_text("0::/b\n")
    assert oom_kill_count(str(tmp_path / "v2"), str(tmp_path)) == 5
    (tmp_path / "none").write_text("0::/missing\n")
    assert oom_kill_count(str(tmp_path / "none"), str(tmp_path)) is None


def test_an_oom_while_building_is_an_oom(monkeypatch):
    from vaemem.measuring.child import worker
    from vaemem.models import build

    def no_memory(*a, **k):
        raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 123 bytes")

    monkeypatch.setattr(build, "build_model", no_memory)
    result = worker.measure_point(_pts(64)[0], 0.0)
    assert result["status"] == "oom" and result["error"].startswith("while building")


def test_a_fused_point_where_no_fused_kernel_takes_the_head_is_an_error_naming_the_math_path(monkeypatch):
    """The fused key means torch's own kernel choice; where the probe finds no fused kernel (ROCm builds whose
    kernels stop at 256 channels) the demand would be the math path's: the point is refused, not mis-keyed."""
    from vaemem import estimate
    from vaemem.measuring.child import worker

    monkeypatch.setattr(estimate, "_fused_attention", lambda torch, device, dtype: False)
    result = worker.measure_point(_pts(64)[0], 0.0)
    assert result["status"] == "error" and "measure it with --attention math" in result["error"]
    math = worker.measure_point(validate(Point("tiny-kl", "decode", "fp32", 64, 64, attention="math")), 0.0)
    assert math["status"] == "ok"


# ---- nothing is ever lost; bad files are refused before anything runs (issue 11) ------------------------------

@pytest.mark.portable
def test_a_failed_append_is_cut_back_to_the_last_whole_line(tmp_path, monkeypatch):
    from vaemem.measuring.parent import store

    path = tmp_path / "m.jsonl"
    append_record(path, {"schema_version": 1, "i": 0})
    before = path.read_bytes()
    real_write = os.write

    def half_then_full(fd, data):
        real_write(fd, data[: len(data) // 2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(store.os, "write", half_then_full)
    with pytest.raises(VaememError, match="No space left on device; the line was not written"):
        append_record(path, {"schema_version": 1, "i": 1, "pad": "x" * 1000})
    monkeypatch.setattr(store.os, "write", real_write)
    assert path.read_bytes() == before  # no half line left behind
    append_record(path, {"schema_version": 1, "i": 2})
    assert [r["i"] for _, _, r in iter_records([path])] == [0, 2]


@pytest.mark.portable
def test_a_short_write_is_an_error_and_leaves_nothing(tmp_path, monkeypatch):
    from vaemem.measuring.parent import store

    path = tmp_path / "m.jsonl"
    real_write = os.write
    monkeypatch.setattr(store.os, "write", lambda fd, data: real_write(fd, data[:3]))
    with pytest.raises(VaememError, match="short write"):
        append_record(path, {"schema_version": 1, "i": 1})
    assert path.read_bytes() == b""


@pytest.mark.parametrize("make,message", [
    pytest.param(lambda p: p.mkdir(), "not a regular file", marks=pytest.mark.portable),
    (lambda p: os.mkfifo(p), "not a regular file"),
    pytest.param(lambda p: (p.parent / "f").write_text("x") or None, None, marks=pytest.mark.portable),
])
def test_out_must_be_a_regular_file_checked_before_anything_runs(tmp_path, make, message):
    from vaemem.measuring.parent.store import check_out_path

    target = tmp_path / "out.jsonl"
    make(target)
    if message is None:  # below a regular file
        target = tmp_path / "f" / "out.jsonl"
        message = "is not a directory"
    fake = FakeLauncher()
    with pytest.raises(VaememError, match=message):
        measure(_pts(64), target, rig="r", runs=1, launcher_factory=lambda n: fake)
    assert fake.ran == []
    with pytest.raises(VaememError, match=message):
        check_out_path(target)


def test_out_must_be_a_jsonl_file(tmp_path):
    """`--out m.txt` measured, and fit and report of its folder then found no measurements."""
    from vaemem.measuring.parent.store import check_out_path

    with pytest.raises(VaememError, match=r"--out .*m\.txt: name a \.jsonl file"):
        check_out_path(tmp_path / "m.txt")
    check_out_path(tmp_path / "m.jsonl")


def test_out_under_proc_is_refused():
    from vaemem.measuring.parent.store import check_out_path

    with pytest.raises(VaememError, match="--out /proc/vaemem.jsonl"):
        check_out_path("/proc/vaemem.jsonl")


def test_readers_refuse_a_fifo_instead_of_blocking(tmp_path):
    fifo = tmp_path / "m.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(VaememError, match="not a regular file"):
        list(iter_records([fifo]))


@pytest.mark.portable
@pytest.mark.parametrize("drop,change,message", [
    ("width", {}, "width missing"), ("point_key", {}, "point_key missing"), ("run", {}, "run missing"),
    (None, {"demand_bytes": -5}, "an ok run needs a non-negative integer demand_bytes"), (None, {"status": "great"}, "status 'great'"),
    (None, {"frames": 0}, "frames missing or not a positive"), (None, {"rig": {}}, "rig.name missing"),
])
def test_a_bad_measurement_line_names_file_and_line_and_can_be_skipped(tmp_path, drop, change, message):
    good = {"schema_version": 1, "model": "tiny-kl", "op": "decode", "dtype": "fp32", "width": 64, "height": 64,
            "batch": 1, "frames": 1, "point_key": "k", "run": 0, "status": "ok", "demand_bytes": 10,
            "rig": {"name": "r"}}
    bad = {k: v for k, v in good.items() if k != drop} | change
    path = tmp_path / "m.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(VaememError, match=rf"m.jsonl:2: {message}"):
        list(iter_records([path]))
    skipped: list = []
    assert len(list(iter_records([path], skip_bad=True, bad=skipped))) == 1 and skipped[0].line == 2


@pytest.mark.portable
def test_shards_write_files_of_their_own_and_resume_reads_them_all(tmp_path):
    from typer.testing import CliRunner

    from vaemem.cli import app

    pts = _pts(64, 96, 128, 160)
    for k in (1, 2):
        measure(shard(pts, k, 2), tmp_path / f"r.shard-{k}-of-2.jsonl", rig="r", runs=1,
                launcher_factory=lambda n: FakeLauncher())
    fake = FakeLauncher()
    assert measure(pts, tmp_path / "r.jsonl", rig="r", runs=1, launcher_factory=lambda n: fake) == []
    assert fake.ran == []  # every run is in one shard file or the other
    res = CliRunner().invoke(app, ["measure", "-m", "tiny-kl", "--op", "decode", "--dtype", "fp32", "--res", "64",
                                   "--shard", "1/3", "--rig", "r", "--dry-run"])
    assert res.exit_code == 0 and "measurements/r.shard-1-of-3.jsonl" in res.output


@pytest.mark.portable
def test_a_run_recorded_twice_is_counted_once(tmp_path):
    from vaemem.fit.coefficients import load_dataset

    out = tmp_path / "a.jsonl"
    measure(_pts(64, 96), out, rig="r", runs=1, launcher_factory=lambda n: FakeLauncher())
    (tmp_path / "b.jsonl").write_bytes(out.read_bytes())
    assert load_dataset([tmp_path]).runs == 2


# ---- nothing a sweep started outlives it (issue 11) -------------------------------------------------------------

def test_a_helper_that_prints_while_importing_cannot_break_the_protocol(tmp_path, monkeypatch):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text('print("hello from a noisy plugin", flush=True)\nprint("{not json")\n')
    monkeypatch.setenv("PYTHONPATH", f"{site}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    pts = [validate(Point("tiny-kl", "decode", "fp32", 64, 64, allocator="glibc-fixed"))]
    (rec,) = measure(pts, tmp_path / "m.jsonl", rig="t", runs=1, launcher_factory=lambda n: ForkLauncher())
    assert rec["status"] == "ok"


def _grandchildren(root: int) -> list[int]:
    """The measuring children of a sweep: descendants of its fork helper (a forked child keeps the helper's
    command line, so only the depth tells them apart)."""
    return [g for c in descendants(root) for g in descendants(c)]


def _parent(pid: int) -> int | None:
    """``pid``'s parent, from /proc (None once it is gone)."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError):
        return None


@contextlib.contextmanager
def _reaped(proc):
    """Run a test's sweep process; whatever the test asserted, nothing of it outlives the test (a sweep left
    running slows every test after it)."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            for p in [*descendants(proc.pid), proc.pid]:
                try:
                    os.kill(p, signal.SIGKILL)
                except OSError:
                    pass
            proc.wait()


def _wait_gone(pids: list[int], within_s: float = 10) -> None:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline and _alive(pids):
        time.sleep(0.2)
    assert _alive(pids) == [], "still running"


def _alive(pids: list[int]) -> list[int]:
    out = []
    for p in pids:
        try:
            if Path(f"/proc/{p}/stat").read_text().split()[2] != "Z":
                out.append(p)
        except OSError:
            pass
    return out


def test_when_the_helper_dies_its_running_child_is_killed_too(tmp_path):
    big = validate(Point("sd15", "decode", "fp32", 1024, 1024))  # minutes: certainly mid-run when the helper dies
    launch = ForkLauncher()
    helper = launch._helper("glibc")
    seen: list[int] = []

    def kill_helper():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not seen:
            time.sleep(0.2)
            seen.extend(descendants(helper.proc.pid))
        time.sleep(1.0)
        os.kill(helper.proc.pid, signal.SIGKILL)

    t = threading.Thread(target=kill_helper, daemon=True)
    t.start()
    (rec,) = measure([big], tmp_path / "h.jsonl", rig="t", runs=1, launcher_factory=lambda n: launch)
    t.join()
    assert rec["status"] == "crash" and seen
    time.sleep(0.5)
    assert _alive(seen) == []  # the child was killed with its group, not orphaned


@pytest.mark.parametrize("sig,code,said", [(signal.SIGTERM, 143, "terminated"),  # (posix_hidden hides SIGHUP)
                                            (getattr(signal, "SIGHUP", 1), 129, "hung up")])
@pytest.mark.parametrize("to_group", [False, True])
def test_sigterm_to_measure_leaves_no_process_and_no_temporary_folder(tmp_path, sig, code, said, to_group):
    """SIGTERM, or SIGHUP (a closed terminal, a dropped ssh session), to the sweep or to its whole process group
    (a terminal's hangup, systemd's stop): every child killed, every file removed, no run recorded. The fork helper
    is in a session of its own, so the sweep alone is signalled and stops it (a helper hit too died first, which a
    GPU thread of --devices could record as a crash)."""
    import subprocess
    import sys

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    out = tmp_path / "m.jsonl"
    # SIGHUP at its default whatever this suite runs under (`nohup make test` ignores it, and the sweep with it)
    proc = subprocess.Popen([sys.executable, "-m", "vaemem.cli", "measure", "-m", "sd15", "--op", "decode",
                             "--dtype", "fp32", "--res", "1024", "--runs", "1", "--rig", "t", "--out", str(out)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=to_group,  # a group of its own to signal, as a terminal's
                            preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL))
    with _reaped(proc):
        deadline = time.monotonic() + 90
        workers: list[int] = []
        while time.monotonic() < deadline and not workers:
            time.sleep(0.2)
            workers = _grandchildren(proc.pid)
        assert workers, "the run never started"
        everything = [proc.pid, *descendants(proc.pid)]
        helpers = [p for p in everything[1:] if _parent(p) == proc.pid]
        assert helpers and all(os.getsid(p) == p for p in helpers)  # the helper leads a session of its own
        if to_group:
            os.killpg(proc.pid, sig)
        else:
            os.kill(proc.pid, sig)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == code and f"{said}: 0 runs kept" in err and not out.exists()
    time.sleep(0.5)
    assert _alive(everything) == [] and [p.name for p in tmp.iterdir() if p.name.startswith("vaemem")] == []


@pytest.mark.parametrize("launcher", ["fork", "spawn"])
def test_a_sweep_killed_outright_leaves_no_process(tmp_path, launcher):
    """SIGKILL gives the sweep no chance to clean up: its fork helper and the running child (spawned or forked)
    die with it (the parent-death signal), instead of holding memory, or a GPU, while the user re-runs."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "vaemem.cli", "measure", "-m", "sd15", "--op", "decode",
                             "--dtype", "fp32", "--res", "1024", "--runs", "1", "--rig", "t", "--launcher", launcher,
                             "--out", str(tmp_path / "m.jsonl")], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    with _reaped(proc):
        deadline = time.monotonic() + 90
        running: list[int] = []
        while time.monotonic() < deadline and not running:
            time.sleep(0.2)
            running = _grandchildren(proc.pid) if launcher == "fork" else descendants(proc.pid)
        assert running, "the run never started"
        time.sleep(1.0)  # the worker past its own start
        everything = descendants(proc.pid)
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
    try:
        _wait_gone(everything)
    finally:  # what the parent-death signal missed must not outlive the test either
        for p in _alive(everything):
            os.kill(p, signal.SIGKILL)
    assert everything


def test_a_helper_that_cannot_start_is_one_line_naming_its_last_words(tmp_path):
    from vaemem.measuring.plumbing.launcher import _Helper

    site = tmp_path / "site"
    site.mkdir()
    (site / "torch.py").write_text('raise ImportError("torch is broken here")\n')
    env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    with pytest.raises(VaememError) as err:
        _Helper(env, tmp_path / "helper.log")
    assert str(err.value) == "the fork helper did not start: ImportError: torch is broken here"


def test_a_sweep_under_nohup_outlives_a_hang_up(tmp_path):
    """`nohup vaemem measure` ignores SIGHUP before the sweep starts: the sweep keeps it ignored, and runs on."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "vaemem.cli", "measure", "-m", "sd15", "--op", "decode",
                             "--dtype", "fp32", "--res", "1024", "--runs", "1", "--rig", "t", "--out",
                             str(tmp_path / "m.jsonl")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    with _reaped(proc):
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not _grandchildren(proc.pid):
            time.sleep(0.2)
        everything = [proc.pid, *descendants(proc.pid)]
        os.kill(proc.pid, signal.SIGHUP)
        time.sleep(1.5)
        assert proc.poll() is None and _alive(everything) == everything  # ignored: the sweep and its run go on
        os.kill(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143 and "terminated: 0 runs kept" in err


def test_the_worker_runs_task_kinds_from_a_table_and_refuses_others(tmp_path):
    from vaemem.measuring.child import worker

    assert set(worker.TASKS) == {"measure", "conv3d"}
    out = tmp_path / "r.json"
    worker.run(json.dumps({"kind": "sing"}), str(out), 0.0)
    result = json.loads(out.read_text())
    assert result["status"] == "error" and "unknown task kind 'sing'; known: measure, conv3d" in result["error"]


def test_a_cpu_points_allocator_must_be_the_hosts():
    """glibc's settings exist on Linux only: elsewhere a CPU point takes the system's allocator, and a Linux host
    refuses 'system' (its runs would be recorded under an allocator that never ran)."""
    from vaemem.measuring.parent.runner import check_options
    from vaemem.measuring.point import default_allocator

    glibc = build_grid(["tiny-kl"], ["decode"], ["fp32"], ["64"], allocators=["glibc-fixed"])
    system = build_grid(["tiny-kl"], ["decode"], ["fp32"], ["64"], allocators=["system"])
    with pytest.raises(VaememError, match="allocator glibc-fixed is not the CPU allocator of os windows: system is"):
        check_options(glibc, 1, "spawn", 10.0, None, os="windows")
    with pytest.raises(VaememError, match="allocator system is not the CPU allocator of os linux: glibc or glibc"):
        check_options(system, 1, "spawn", 10.0, None, os="linux")
    check_options(glibc, 1, "spawn", 10.0, None, os="linux")
    check_options(system, 1, "spawn", 10.0, None, os="darwin")
    assert (default_allocator("cpu", "windows"), default_allocator("cpu", "linux"),
            default_allocator("cuda:0", "windows")) == ("system", "glibc-fixed", "native")
    assert allocators.startup_env("system") == {}  # the OS's own malloc, as it comes


def test_points_on_a_device_torch_does_not_see_are_refused_before_any_run(tmp_path):
    """Known answers with a fake probe (what torch would print): no cuda device, or too few for the index or the
    --devices asked, refuses with one line; CPU points ask nothing (a probe that cannot run is never run)."""
    import json as _json
    import sys as _sys

    from vaemem.measuring.parent.runner import check_devices

    def probe(seen: dict) -> list[str]:
        return [_sys.executable, "-c", f"print({_json.dumps(_json.dumps(seen))})"]

    cuda = [Point("tiny-kl", "decode", "fp32", 64, 64, allocator="native", device="cuda")]
    with pytest.raises(VaememError, match=r"device cuda: this environment's torch sees no cuda device"):
        check_devices(cuda, None, probe({"cuda": 0, "mps": False, "xpu": 0}))
    check_devices(cuda + [Point("tiny-kl", "decode", "fp32", 64, 64, allocator="native", device="cuda:1")], [0, 1],
                  probe({"cuda": 2, "mps": False, "xpu": 0}))
    with pytest.raises(VaememError, match=r"device cuda:3: torch sees 2 cuda devices \(indices 0-1\)"):
        check_devices(cuda, [0, 3], probe({"cuda": 2, "mps": False, "xpu": 0}))
    with pytest.raises(VaememError, match="cannot ask torch which devices it sees"):
        check_devices(cuda, None, [str(tmp_path / "no-such-interpreter")])
    check_devices([Point("tiny-kl", "decode", "fp32", 64, 64)], None, [str(tmp_path / "no-such-interpreter")])


def test_kill_group_kills_a_process_that_leads_no_group_yet():
    """The one kill of a run's process (the launcher's and the fork helper's): a forked child before its setpgid
    leads no group, and killpg alone missed it."""
    import subprocess
    import sys

    from vaemem.measuring.plumbing.forkserver import kill_group

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # in this test's group
    try:
        assert os.getpgid(proc.pid) != proc.pid
        kill_group(proc.pid)
        assert proc.wait(timeout=10) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    kill_group(proc.pid)  # gone (reaped): nothing to kill, and no error
    kill_group(None)
