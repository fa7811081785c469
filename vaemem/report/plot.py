"""One PNG per group: measured demand against pixels, the fitted envelope, the legacy line, and the ratios."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vaemem import estimate
from vaemem.fit.coefficients import Dataset

MIB = 1024 * 1024


def plot_groups(data: Dataset, coef: dict[str, Any], out_dir: Path, only: list[str] | None = None) -> list[Path]:
    """Write ``<group>.png`` for every fitted group (or those in ``only``); return the paths. Every ok run is
    plotted, so run-to-run scatter is visible."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    out_dir.mkdir(parents=True, exist_ok=True)
    fitted = {g["group"]: g for g in coef["groups"]}
    written = []
    for gid, (key, pts) in sorted(data.groups.items()):
        if gid not in fitted or (only and gid not in only):
            continue
        g = fitted[gid]
        fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6.5), sharex=True,
                                          gridspec_kw={"height_ratios": [3, 1.4]})
        xs = sorted(p.pixels for p in pts)
        span = [0, xs[-1] * 1.05]
        tile_px = pts[0].tile_pixels
        env = [(g["slope_bytes_per_pixel"] * x + g.get("tile_slope_bytes_per_tile_pixel", 0) * tile_px
                + g["base_bytes"]) / MIB for x in span]
        rx, ry = zip(*[(p.pixels, d) for p in pts for d in p.run_demands])
        top.scatter([x / 1e6 for x in rx], [y / MIB for y in ry], s=18, color="black", label="measured runs", zorder=3)
        top.plot([x / 1e6 for x in span], env, color="tab:blue",
                 label=f"fitted envelope (+{coef['margin']:.0%}): {g['slope_bytes_per_pixel']:.0f} B/px + "
                       f"{g['base_bytes'] / MIB:.0f} MiB")
        model = coef["models"][pts[0].point["model"]]
        leg = []
        for p in sorted(pts, key=lambda p: p.pixels):
            pt = p.point
            leg.append((p.pixels, estimate.legacy_bytes(key["op"], pt["width"], pt["height"], dtype=key["dtype"],
                                                        backend=key["conv_backend"], sd_family=model["family"] == "sd",
                                                        batch=pt["batch"], frames=pt["frames"], tile=pt["tile"])))
        top.plot([x / 1e6 for x, _ in leg], [y / MIB for _, y in leg], color="tab:red", linestyle="--",
                 marker="x", label="legacy rule")
        top.set_ylabel("working memory (MiB)")
        top.set_title(gid, fontsize=10)
        top.legend(fontsize=8, loc="upper left")
        top.grid(alpha=0.3)
        line = {p.pixels: (g["slope_bytes_per_pixel"] * p.pixels
                           + g.get("tile_slope_bytes_per_tile_pixel", 0) * p.tile_pixels + g["base_bytes"]) for p in pts}
        bottom.scatter([p.pixels / 1e6 for p in pts], [line[p.pixels] / p.demand_bytes for p in pts],
                       color="tab:blue", s=18, label="fitted / demand")
        legacy = dict(leg)
        bottom.scatter([p.pixels / 1e6 for p in pts], [legacy[p.pixels] / p.demand_bytes for p in pts],
                       color="tab:red", marker="x", s=22, label="legacy / demand")
        bottom.axhline(1.0, color="gray", linewidth=1)
        bottom.set_yscale("log")
        plain = FuncFormatter(lambda v, _: f"{v:g}")
        bottom.yaxis.set_major_formatter(plain)
        bottom.yaxis.set_minor_formatter(plain)
        bottom.set_ylabel("reservation / demand")
        bottom.set_xlabel("megapixels (width x height x batch x frames)")
        bottom.legend(fontsize=8)
        bottom.grid(alpha=0.3, which="both")
        fig.tight_layout()
        path = out_dir / (gid.replace("/", "_") + ".png")
        fig.savefig(path, dpi=90, metadata={"Software": None})  # no version stamp: files diff only when data do
        plt.close(fig)
        written.append(path)
    return written
