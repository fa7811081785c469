"""The predicted time of a sweep: known answers from a synthetic history."""

from __future__ import annotations

import pytest

from vaemem.measuring.parent.eta import predict
from vaemem.measuring.point import Point


def _run(model, op, w, h, op_s, start_s=0.5, tile=None, status="ok"):
    p = Point(model, op, "fp32", w, h, tile=tile, allocator="glibc-fixed")
    return {"model": model, "op": op, "dtype": "fp32", "pixels": p.pixels, "tile": tile, "status": status,
            "op_wall_s": op_s, "run_wall_s": op_s + start_s}


def test_time_scales_with_pixels_from_the_nearest_point_of_the_same_kind():
    history = [_run("sd15", "decode", 64, 64, 1.0), _run("sd15", "decode", 512, 512, 100.0),
               _run("sd15", "decode", 64, 64, 50.0, status="oom")]  # a failed run says nothing about speed
    eta = predict([Point("sd15", "decode", "fp32", 128, 64)], history)
    assert eta.seconds == pytest.approx(0.5 + 2.0) and eta.from_same_point_kind == 1
    eta = predict([Point("sd15", "decode", "fp32", 512, 256)], history)
    assert eta.seconds == pytest.approx(0.5 + 50.0)


def test_other_models_of_the_kernel_class_are_a_counted_guess_and_tiny_ones_are_ignored():
    history = [_run("flux1", "decode", 100, 100, 1.0), _run("tiny-kl", "encode", 64, 64, 0.001)]
    eta = predict([Point("cogview4", "decode", "fp32", 200, 100), Point("wan21", "decode", "fp32", 64, 64),
                   Point("sd15", "encode", "fp32", 64, 64)], history)
    assert eta.seconds == pytest.approx(0.5 + 2.0)
    assert (eta.from_same_point_kind, eta.guessed, eta.unknown) == (0, 1, 2)
    assert "2 with nothing comparable" in eta.describe()
    none = predict([Point("wan21", "decode", "fp32", 64, 64)], history)  # nothing comparable at all: no figure
    assert none.describe() == "1 run, time unknown (nothing comparable measured)"


def test_tiled_and_untiled_are_different_kinds():
    history = [_run("sd15", "decode", 512, 512, 10.0)]
    eta = predict([Point("sd15", "decode", "fp32", 512, 512, tile=256)], history)
    assert eta.from_same_point_kind == 0 and eta.guessed == 1


def test_the_sweeps_own_rig_is_asked_before_any_other():
    """bf16 SD1.5 on an AVX2 EPYC (aten convolution) was 100x slower than on an AMX Xeon: a Xeon sweep is
    predicted from the Xeon's runs of the same kind, then from its runs of the class, and only then from others."""
    def on(rig, *args):
        return {**_run(*args), "rig": {"name": rig}}

    history = [on("epyc", "sd15", "decode", 64, 64, 100.0), on("xeon", "sd15", "decode", 64, 64, 1.0),
               on("epyc", "flux1", "decode", 64, 64, 100.0), on("xeon", "cogview4", "decode", 64, 64, 2.0),
               on("epyc", "sd15", "encode", 64, 64, 30.0)]
    assert predict([Point("sd15", "decode", "fp32", 64, 64)], history, "xeon").seconds == pytest.approx(1.5)
    eta = predict([Point("flux1", "decode", "fp32", 64, 64)], history, "xeon")  # xeon's class median beats epyc's flux1
    assert (eta.seconds, eta.from_same_point_kind, eta.guessed) == (pytest.approx(0.5 + 1.5), 0, 1)
    assert predict([Point("flux1", "decode", "fp32", 64, 64)], history, "xeon-other").seconds == pytest.approx(100.5)
    assert predict([Point("sd15", "encode", "fp32", 64, 64)], history, "xeon").seconds == pytest.approx(30.5)
    assert predict([Point("flux1", "decode", "fp32", 64, 64)], history).seconds == pytest.approx(100.5)  # any rig


def test_runs_of_another_device_say_nothing_of_a_points_time():
    """A GPU point beside CPU campaigns is not predicted by their times (it was: 4.1 min for a cuda sd15 decode, the
    CPU's); a run of the same device type is, whatever its index."""
    history = [_run("sd15", "decode", 512, 512, 100.0)]
    gpu = Point("sd15", "decode", "fp32", 512, 512, allocator="native", device="cuda")
    eta = predict([gpu], history)
    assert eta.unknown == 1 and eta.from_same_point_kind == 0
    eta = predict([gpu], [{**history[0], "device": "cuda:1", "op_wall_s": 2.0, "run_wall_s": 2.5}])
    assert eta.seconds == pytest.approx(0.5 + 2.0) and eta.from_same_point_kind == 1
