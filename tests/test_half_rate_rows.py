"""GeForce tensor-core floats run at half rate: a tile taller than a GEMM's m is priced in
16-row MMA steps there (hybrid._geometry), and nowhere else."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from torch_gemm_cost.hardware.catalog import DeviceSpec, get_device, list_devices
from torch_gemm_cost.predict import shipped_hybrid
from torch_gemm_cost.predict.gemm.features import DeviceTable, RowInputs
from torch_gemm_cost.predict.gemm.tiles import candidate_table, mma_row_share
from torch_gemm_cost.records.types import DTYPE_NAMES, GemmBatch

DTYPE_INDEX = {name: i for i, name in enumerate(DTYPE_NAMES)}


def rows_of(devices: list[str | DeviceSpec], dtypes: list[str], m: int = 1) -> RowInputs:
    table = DeviceTable.build([get_device(d) for d in devices])
    n = len(dtypes)
    g = GemmBatch.from_dims(m=[m] * n, n=[4096] * n, k=[4096] * n, dtype="float16", op="linear")
    g = replace(g, dtype_index=torch.tensor([DTYPE_INDEX[d] for d in dtypes]))
    return RowInputs.gather(g, table, torch.arange(n), torch.zeros(n, dtype=torch.long))


def test_mma_row_share_by_hand() -> None:
    # m = 1 in a 64-row tile: one 16-row step of 64 rows = 0.25; m = 20 in a 128-row tile:
    # ⌈20/16⌉·16 = 32 of 128 = 0.25; m = 100 in 64-row tiles: 112 of ⌈100/64⌉·64 = 128 =
    # 0.875; m = 200 in 128-row tiles: 208 of 256 = 0.8125; m = 64 in a 64-row tile: 1
    m = torch.tensor([1.0, 20.0, 100.0, 200.0, 64.0], dtype=torch.float64)
    tile_m = torch.tensor([[64.0], [128.0], [64.0], [128.0], [64.0]], dtype=torch.float64)
    assert mma_row_share(m, tile_m).squeeze(1).tolist() == pytest.approx(
        [0.25, 0.25, 0.875, 0.8125, 1.0], rel=1e-15)


def test_only_geforce_tensor_floats_step() -> None:
    # RTX 3090 (GA102 GeForce): fp16, bf16, tf32 at half rate with fp32 accumulation; int8
    # (int32 accumulation) at full rate; fp32 on the CUDA cores. RTX 4090: fp8 at half rate.
    # The A40 (GA102, datacenter) and the RTX A6000 (GA102, workstation): full rate.
    rows = rows_of(["rtx_3090"] * 5 + ["rtx_4090", "a40", "rtx_a6000"],
                   ["float16", "bfloat16", "tf32", "int8", "float32", "float8_e4m3fn",
                    "float16", "float16"])
    assert rows.mma_row_steps.tolist() == [True, True, True, False, False, True, False, False]
    # and no device but a GeForce board steps any dtype it runs
    for d in list_devices():
        if d.board_class == "geforce":
            continue
        n = len(DTYPE_NAMES)
        table = DeviceTable.build([d])
        g = replace(GemmBatch.from_dims(m=[1] * n, n=[8] * n, k=[8] * n),
                    dtype_index=torch.arange(n))
        gathered = RowInputs.gather(g, table, torch.zeros(n, dtype=torch.long),
                                    torch.zeros(n, dtype=torch.long))
        assert not bool(gathered.mma_row_steps.any()), d.id


def test_decode_work_by_hand() -> None:
    # m = 1, n = k = 4096 fp16 on the RTX 3090 (82 SMs, 256 KB of registers a SM). Candidate
    # 64x32, no split: 4 CTAs a SM fit (256 KB / (64·32·4·2 B) = 16, capped at 4), 328 slots;
    # ⌈4096/32⌉ = 128 tiles, one wave: 2·64·32·4096·328 = 5,502,926,848 FLOP of padded work.
    # In 16-row steps a quarter of it runs: 1,375,731,712. The A40 keeps the whole tile (84 SMs:
    # 2·64·32·4096·336 = 5,637,144,576).
    h = shipped_hybrid()
    rows = rows_of(["rtx_3090", "a40"], ["float16", "float16"])
    geo = h._geometry(rows)
    table = candidate_table()
    col = next(i for i in range(table.tile_m.shape[1])
               if (table.tile_m[1, i], table.tile_n[1, i], table.split_k[1, i]) == (64, 32, 1))
    assert geo["work"][:, col].tolist() == [1_375_731_712.0, 5_637_144_576.0]
    # every candidate (all taller than m = 1) runs 16 of its rows on the GeForce board, against
    # the same board as a datacenter one
    as_datacenter = replace(get_device("rtx_3090"), board_class="datacenter")
    share = geo["work"][0] / h._geometry(rows_of([as_datacenter], ["float16"]))["work"][0]
    assert share.tolist() == pytest.approx((16.0 / geo["tile_m"][0]).tolist(), rel=1e-12)


def test_a_geforce_decode_gemm_streams_its_weights() -> None:
    # m = 1, n = 4096, k = 14336 fp16 Linear on the RTX 3090: its weights are 4096·14336·2 B =
    # 117.4 MB, 0.125 ms at 936 GB/s. In a 64-row tile at 78.1 TFLOP/s its math takes
    # 2·64·4096·14336 / 78.1e12 s = 0.096 ms, in a 128-row one 0.192 ms: compute bound as the
    # whole tile. In 16-row steps 0.024 ms: the weights' stream bounds it.
    g = GemmBatch.from_dims(m=[1], n=[4096], k=[14336], dtype="float16", op="linear")
    h = shipped_hybrid()
    geforce = get_device("rtx_3090")
    assert h.predict(g, geforce).bound == ("memory",)
    assert h.predict(g, replace(geforce, board_class="datacenter")).bound == ("compute",)


def test_geforce_benchmark_prices_the_3090s_rows_as_predict_csv_does(data_dir) -> None:
    # the benchmark's prices (benchmarks/geforce_boost.py) are, row for row, what a user's
    # `predict-csv` over gemm/llmservingsim.csv.gz gives (tests/test_measured_paths.py holds
    # predict-csv equal to predict_measured): every 97th row, shipped weights, to the bit
    import importlib.util
    from pathlib import Path

    from torch_gemm_cost.measured.gemm import load_gemms

    spec = importlib.util.spec_from_file_location(
        "geforce_boost", Path(__file__).resolve().parents[1] / "benchmarks" / "geforce_boost.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rows = load_gemms(data_dir, sources=["llmservingsim"])
    part = rows.select(torch.arange(len(rows.gpu)) % 97 == 0)
    hybrid = shipped_hybrid()
    ours = bench.predicted_ms(hybrid, get_device("rtx_3090"), part)
    assert len(ours) > 300
    assert torch.equal(ours, hybrid.predict_measured(part))
