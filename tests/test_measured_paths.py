"""One path per measured row: ``torch-gemm-cost predict-csv`` over every measured file of the gemm,
vec, attention and comm schemas gives, row for row, what the library's own measured-row path
gives for the same rows (relative 1e-9).

The library's side is each model's own ``predict_measured`` (the hybrid's, the attention
model's) on the file as ``measured`` reads it, the op-cost table's ``measured_op_times_ms`` with
the timing the file's source stands for (vidur's file: fused kernels), and the shipped
collective model on the calls ``to_calls`` keeps. A file's rows are a deterministic subset:
every row of a file of at most ``ROWS_PER_FILE`` rows; of a larger one, every k-th row plus the
first row of each (gpu, source, timing, dtype, op/phase/collective) group, so every group of
every file is covered.
"""

from __future__ import annotations

import csv
import gzip
import math
from pathlib import Path

import pytest
import torch

from torch_gemm_cost.cli import main

pytestmark = pytest.mark.data

SCHEMAS = ("gemm", "vec", "attention", "comm")
ROWS_PER_FILE = 3000
# the columns whose values make a group every subset keeps a row of
GROUP_COLUMNS = ("gpu", "source", "timing", "dtype", "op", "phase", "kv_dtype", "collective",
                 "topology")
REL = 1e-9


def _subset(path: Path, out: Path) -> int:
    """Write the deterministic subset of ``path`` to ``out`` (header kept); its row count."""
    with gzip.open(path, "rt", newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader)
        rows = list(reader)
    step = max(1, math.ceil(len(rows) / ROWS_PER_FILE))
    key = [header.index(c) for c in GROUP_COLUMNS if c in header]
    first: dict[tuple[str, ...], int] = {}
    for i, row in enumerate(rows):
        first.setdefault(tuple(row[j] for j in key), i)
    keep = sorted(set(range(0, len(rows), step)) | set(first.values()))
    with gzip.open(out, "wt", newline="") as fh:
        csv.writer(fh, lineterminator="\n").writerows([header, *(rows[i] for i in keep)])
    return len(keep)


def _predict_csv(src: Path, out: Path) -> tuple[list[float | None], list[str]]:
    """predicted_ms (None where empty) and error of every row, as a user's call writes them."""
    assert main(["predict-csv", str(src), "--out", str(out), "--skip-bad"]) == 0
    with open(out, newline="") as fh:
        table = list(csv.reader(fh))
    col = {c: table[0].index(c) for c in ("predicted_ms", "error")}
    times = [float(r[col["predicted_ms"]]) if r[col["predicted_ms"]] else None
             for r in table[1:]]
    return times, [r[col["error"]] for r in table[1:]]


def _library(schema: str, src: Path, original: Path) -> tuple[torch.Tensor, list[int]]:
    """The library's measured-row path: times of the rows it prices, and their positions."""
    if schema == "gemm":
        from torch_gemm_cost.measured.gemm import read_gemm_file
        from torch_gemm_cost.predict import shipped_hybrid

        rows = read_gemm_file(src)
        return shipped_hybrid().predict_measured(rows).double(), list(range(len(rows)))
    if schema == "attention":
        from torch_gemm_cost.measured.attention import load_attention
        from torch_gemm_cost.predict.attention import AttentionPredictor

        calls = load_attention(src)
        return (AttentionPredictor.shipped().predict_measured(calls).double(),
                list(range(len(calls))))
    if schema == "vec":
        from torch_gemm_cost.hardware.catalog import get_device
        from torch_gemm_cost.hardware.dtypes import resolve_dtype
        from torch_gemm_cost.predict.ops import measured_op_times_ms

        with gzip.open(src, "rt", newline="") as fh:
            recs = list(csv.DictReader(fh))
        fused = original.name.startswith("vidur")  # vidur timed fused kernels, NeuSight events
        out = torch.empty(len(recs), dtype=torch.float64)
        for i, r in enumerate(recs):
            (out[i],) = measured_op_times_ms(
                [r["op"]], [resolve_dtype(r["dtype"]).in_bytes], [int(r["rows"])],
                [int(r["cols"])], [fused], get_device(r["gpu"]))
        return out, list(range(len(recs)))
    from torch_gemm_cost.measured.comm import comm_times_ms, read_comm_file, to_calls

    calls, devices, kept, _ = to_calls(read_comm_file(src))
    return comm_times_ms(calls, devices), kept


@pytest.mark.parametrize("schema", SCHEMAS)
def test_predict_csv_prices_every_measured_file_as_the_library_does(
        schema: str, data_dir: Path, tmp_path: Path) -> None:
    files = sorted((data_dir / schema).glob("*.csv*"))
    if not files:
        pytest.skip(f"no {schema} files under {data_dir.resolve()}")
    for original in files:
        src = tmp_path / original.name
        n = _subset(original, src)
        times, errors = _predict_csv(src, tmp_path / f"{original.name}.out.csv")
        want, priced = _library(schema, src, original)
        assert len(times) == n
        # every row the library prices predict-csv prices; the others (collectives the model
        # cannot price) carry an error and no time
        assert [i for i, e in enumerate(errors) if not e] == priced, original.name
        assert all(times[i] is None for i, e in enumerate(errors) if e)
        got = torch.tensor([times[i] for i in priced], dtype=torch.float64)
        assert torch.isfinite(want).all() and (want > 0).all()
        rel = ((got - want).abs() / want).max().item()
        assert rel <= REL, f"{original.name}: predict-csv differs from the library by {rel:.3g}"

