"""One PNG per group: measured demand, vaemem's reservation, the dry-run peak and the legacy rule per point."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vaemem import estimate
from vaemem.errors import VaememError
from vaemem.estimate import MIB
from vaemem.fit.coefficients import Dataset, dry_of, request_of



def plot_groups(data: Dataset, coef: dict[str, Any], out_dir: Path, only: list[str] | None = None) -> list[Path]:
    """Write ``<group>.png`` for every group priced by the file (or those in ``only``); return the paths. Every ok
    run is plotted, so run-to-run scatter is visible. x is width x height x batch x frames; each point also shows
    what the file reserves (through the estimator), its dry-run peak (from the structure) and the legacy rule."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise VaememError(f"--out {out_dir}: cannot make that directory ({e.strerror})") from None
    written = []
    for gid, (key, pts) in sorted(data.groups.items()):
        if only and gid not in only:
            continue
        pts = sorted(pts, key=lambda p: (p.pixels, p.point["frames"]))
        rows = []
        for p in pts:
            pt = p.point
            model = coef["models"][pt["model"]]
            req = request_of(pt, key)
            try:
                if req is None:
                    continue
                e = estimate.explain(pt["model"], key["op"], pt["width"], pt["height"], coefficients=coef, **req)
            except ValueError:
                continue
            d = dry_of(pt, key, coef.get("structures", {}))
            legacy = estimate.legacy_bytes(key["op"], pt["width"], pt["height"], dtype=key["dtype"],
                                           backend=key["conv_backend"], sd_family=model["family"] == "sd",
                                           batch=pt["batch"], frames=pt["frames"], tile=pt["tile"])
            rows.append((p, e, d[0] if d else None, legacy))
        if not rows:
            continue
        fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6.5), sharex=True,
                                          gridspec_kw={"height_ratios": [3, 1.4]})
        mpx = [p.pixels / 1e6 for p, *_ in rows]
        rx, ry = zip(*[(p.pixels / 1e6, d / MIB) for p, *_ in rows for d in p.run_demands])
        top.scatter(rx, ry, s=18, color="black", label="measured runs", zorder=3)
        top.plot(mpx, [e.bytes / MIB for _, e, _, _ in rows], color="tab:blue", marker="o", markersize=3,
                 label=f"vaemem reservation ({rows[0][1].source}, +{coef['margin']:.0%} margin)")
        if any(d for _, _, d, _ in rows):
            top.plot(mpx, [(d or float("nan")) / MIB for _, _, d, _ in rows], color="tab:green", marker=".",
                     linestyle=":", label="dry-run peak (structure)")
        top.plot(mpx, [lg / MIB for *_, lg in rows], color="tab:red", linestyle="--", marker="x",
                 label="legacy rule")
        top.set_ylabel("working memory (MiB)")
        top.set_title(gid, fontsize=10)
        top.legend(fontsize=8, loc="upper left")
        top.grid(alpha=0.3)
        bottom.scatter(mpx, [e.bytes / p.demand_bytes for p, e, _, _ in rows], color="tab:blue", s=18,
                       label="vaemem / demand")
        bottom.scatter(mpx, [lg / p.demand_bytes for p, _, _, lg in rows], color="tab:red", marker="x", s=22,
                       label="legacy / demand")
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
