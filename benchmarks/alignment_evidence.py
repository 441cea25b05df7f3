"""What the measured data says about operand alignment: median throughput by alignment.

    python benchmarks/alignment_evidence.py [--data ../shared/data]

For each GPU and dtype with GEMMs of at least 2 GFLOP, the median achieved TFLOP/s grouped by the
narrower of A's and B's vector width (bytes). NB: the groups differ in shapes too (aligned dims
are multiples of larger powers of two), so a gap is evidence, not proof. fp16 rows are all aligned
(vidur) or were padded before timing (DeepBench): no fp16 group below 16 B exists. Writes
``benchmarks/results/alignment_evidence.md``.
"""

from __future__ import annotations

import argparse
import statistics
from collections import defaultdict
from pathlib import Path

from torch_gemm_cost.measured.gemm import DEFAULT_DATA_DIR, load_gemms

RESULTS = Path(__file__).resolve().parent / "results" / "alignment_evidence.md"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=DEFAULT_DATA_DIR, type=Path)
    args = parser.parse_args()
    data = load_gemms(args.data)
    g = data.gemms
    align = g.a_align_bytes.minimum(g.b_align_bytes).long().tolist()
    tflops = (g.flops / data.latency_ms / 1e9).tolist()
    big = (g.flops >= 2e9).tolist()
    dtypes = g.dtype_names()
    groups: dict[tuple[str, str], dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for i, keep in enumerate(big):
        if keep:
            groups[(data.gpu[i], dtypes[i])][align[i]].append(tflops[i])
    widths = sorted({w for by in groups.values() for w in by})
    lines = [
        "# Achieved throughput by operand alignment (measured data)",
        "",
        ("Command: `python benchmarks/alignment_evidence.py`. GEMMs of at least 2 GFLOP; median "
         "TFLOP/s (rows) by the narrower of A's and B's vector width. Groups also differ in shapes."),
        "",
        "| gpu | dtype | " + " | ".join(f"{w} B" for w in widths) + " |",
        "|---|---|" + "---:|" * len(widths),
    ]
    for (gpu, dtype), by in sorted(groups.items()):
        cells = [
            f"{statistics.median(by[w]):.1f} ({len(by[w])})" if by.get(w) else "-" for w in widths
        ]
        lines.append(f"| {gpu} | {dtype} | " + " | ".join(cells) + " |")
    RESULTS.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
