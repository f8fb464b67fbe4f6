"""Bar plot of a bench_gemm.py run: TFLOP/s per shape per implementation.

    python benchmarks/plot.py benchmarks/results/gemm_TAG.json [out.png]
"""

from __future__ import annotations

import json
import sys

import matplotlib

matplotlib.use("Agg")  # no display on the GPU machine
import matplotlib.pyplot as plt  # noqa: E402


def _series(rows):
    """(label, [TFLOP/s or 0 per shape]) for XLA, best Pallas, hopper default, best hopper.

    The best-hopper bar appears only when explicit configs were run (else it equals the default).
    """
    def pick(row, name):
        return row["variants"].get(name, {}).get("tflops", 0.0) if name else 0.0

    series = [("XLA jnp.dot", [pick(r, "xla") for r in rows]),
              ("Pallas MGPU (best config)", [pick(r, r["best_pallas"]) for r in rows]),
              ("hopper_matmul (default)", [pick(r, "hopper") for r in rows])]
    if any(n.startswith("hopper:") for r in rows for n in r["variants"]):
        series.append(("hopper_matmul (best config)", [pick(r, r["best_hopper"]) for r in rows]))
    return [(label, values) for label, values in series if any(values)]


def plot_results(rows, path: str, title: str = "bf16 GEMM") -> None:
    series = _series(rows)
    labels = ["x".join(map(str, r["shape"])) + ("" if r["status"] in ("ok", "-") else
                                                  f"\n{r['status']}") for r in rows]
    width = 0.8 / max(len(series), 1)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(rows) + 2), 4.5))
    for i, (label, values) in enumerate(series):
        xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(rows))]
        ax.bar(xs, values, width, label=label)
    ax.set_xticks(range(len(rows)), labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("TFLOP/s (2MNK / median time)")
    ax.set_title(title, fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    with open(sys.argv[1]) as fh:
        data = json.load(fh)
    out = sys.argv[2] if len(sys.argv) > 2 else sys.argv[1].removesuffix(".json") + ".png"
    env = data["environment"]
    plot_results(data["shapes"], out, title=f"bf16 GEMM, {env['device']}, jax {env['jax']}")
    print(out)
