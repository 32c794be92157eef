"""benchmarks.png: the build, load, contention and CPU sections as pictures (nothing without
matplotlib: the report and the JSON hold every number)."""

from __future__ import annotations

import sys
from pathlib import Path

from .peer import GSPLAT_VERSION


def plot(results: dict, path: Path) -> None:
    try:
        import matplotlib
    except ImportError:  # a GPU image without it: the report and the JSON hold every number
        print(f"bench: no matplotlib here, so no {path.name}", file=sys.stderr)
        return

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    fig.suptitle(
        f"prebuild benchmarks, {results['date']}"
        + (" (--quick: numbers mean nothing)" if results["quick"] else "")
    )

    def bars(ax, labels, stats, title, unit="s", log=False):
        med = [s["median"] for s in stats]
        err = [[s["median"] - s["min"] for s in stats], [s["max"] - s["median"] for s in stats]]
        ax.barh(
            range(len(labels)),
            med,
            xerr=err,
            color=["tab:green" if "prebuild" in l else "tab:red" for l in labels],
        )
        ax.set_yticks(range(len(labels)), labels, fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel(unit)
        ax.set_title(title, fontsize=10)
        if log:
            ax.set_xscale("log")

    b, p = results.get("build"), results.get("peer")
    if b:
        labels = [f"prebuild: {k}" for k in b["rows"]]
        stats = [v["seconds"] for v in b["rows"].values()]
        if p:
            labels.append(f"gsplat {GSPLAT_VERSION} JIT build")
            stats.append(p["seconds"])
        bars(axes[0][0], labels, stats, "1. build (sm_80), wall time", log=True)
    ld = results.get("load")
    if ld:
        bars(
            axes[0][1],
            [k.replace("prebuild", "prebuild") for k in ld["rows"]],
            list(ld["rows"].values()),
            "2. fresh interpreter to first op result",
            log=True,
        )
    c = results.get("contention")
    if c:
        ax = axes[1][0]
        for mode in dict.fromkeys(r["mode"] for r in c["rows"]):
            rs = [r for r in c["rows"] if r["mode"] == mode]
            ax.errorbar(
                [r["n"] for r in rs],
                [r["seconds"]["median"] for r in rs],
                yerr=[
                    [r["seconds"]["median"] - r["seconds"]["min"] for r in rs],
                    [r["seconds"]["max"] - r["seconds"]["median"] for r in rs],
                ],
                marker="o",
                label=mode,
                capsize=3,
            )
        ax.set_xscale("log", base=2)
        ax.set_xlabel("processes started at once")
        ax.set_ylabel("s until all have a result")
        ax.set_title("3. contention", fontsize=10)
        ax.legend(fontsize=8)
    cpu = results.get("cpu")
    if cpu:
        ax = axes[1][1]
        labels = [f"SSIM {r['size']} B={r['batch']}" for r in cpu["ssim"]]
        labels += [f"raster {r['gaussians']:,} G" for r in cpu["raster"]]
        y = range(len(labels))
        vs_ms = [r["ratio_msssim"] for r in cpu["ssim"]] + [float("nan")] * len(cpu["raster"])
        vs_plain = [r["ratio_conv2d"] for r in cpu["ssim"]] + [r["ratio"] for r in cpu["raster"]]
        ax.barh(
            [i - 0.2 for i in y], vs_plain, height=0.4, label="vs plain PyTorch (conv2d / chain)"
        )
        ax.barh([i + 0.2 for i in y], vs_ms, height=0.4, label="vs pytorch-msssim")
        ax.axvline(1, color="black", lw=0.8)
        ax.set_yticks(list(y), labels, fontsize=8)
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.set_xlabel("speed-up of prebuild (x, forward + backward, CPU)")
        ax.set_title("4. CPU kernels", fontsize=10)
        ax.legend(fontsize=8)
    for ax in axes.flat:
        if not ax.has_data():
            ax.set_axis_off()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
