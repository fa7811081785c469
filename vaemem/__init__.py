"""vaemem: measured VAE working-memory coefficients for image and video generation apps.

The Python API under the CLI; heavy packages are imported only when a function is called::

    import vaemem
    points = vaemem.grid(["sd15"], ["decode"], ["fp32"], ["256", "512"], allocators=["glibc-fixed"])
    records = vaemem.measure(points, "measurements/my-rig.jsonl", rig="my-rig")
    df = vaemem.load_measurements("measurements")
"""

from __future__ import annotations

# No imports here: `import vaemem.estimate` runs this file first and must stay light.

__version__ = "0.1.0"


def grid(*args: object, **kwargs: object) -> object:
    """Validated points of a grid; see :func:`vaemem.measuring.point.build_grid`."""
    from vaemem.measuring.point import build_grid

    return build_grid(*args, **kwargs)


def measure(points: object, out: object, **kwargs: object) -> object:
    """Measure every run of ``points`` in fresh processes; see :func:`vaemem.measuring.parent.runner.measure`."""
    from vaemem.measuring.parent.runner import measure as _measure

    return _measure(points, out, **kwargs)


def load_measurements(paths: object, skip_bad: bool = False) -> object:
    """Measurement files or directories as a pandas DataFrame; see :func:`vaemem.measuring.parent.store.load_measurements`."""
    from vaemem.measuring.parent.store import load_measurements as _load

    return _load(paths, skip_bad=skip_bad)
