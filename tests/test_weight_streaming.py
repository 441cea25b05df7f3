"""benchmarks/weight_streaming.py: the working-set bins and the floor-plus-streaming share by
hand, and a clear error without data."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from torch_gemm_cost.hardware.catalog import get_device

_spec = importlib.util.spec_from_file_location(
    "weight_streaming_bench",
    Path(__file__).resolve().parents[1] / "benchmarks" / "weight_streaming.py")
assert _spec is not None and _spec.loader is not None
weight_streaming = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(weight_streaming)


def test_working_set_bins_by_hand() -> None:
    # a 4096 x 4096 bf16 weight is 33,554,432 B; six layers' of them, 201,326,592 B, are
    # 2.0 L2s of an L40S (96 MiB = 100,663,296 B): the "1-2" bin, edges inclusive above
    l40s = get_device("l40s")
    ratio = weight_streaming.COPIES * 4096 * 4096 * 2 / l40s.l2_bytes
    assert ratio == pytest.approx(2.0)
    assert weight_streaming.LABELS[weight_streaming.bin_of(ratio)] == "1-2"
    # one more token of N tips it into "2-4"; past 16 L2s everything shares the last bin
    assert weight_streaming.LABELS[weight_streaming.bin_of(ratio * 1.001)] == "2-4"
    assert weight_streaming.bin_of(1e6) == len(weight_streaming.LABELS) - 1


def test_share_recovers_a_floor_plus_streaming_time() -> None:
    # rows made of a 2 µs floor and 8 and 16 µs of streaming at the datasheet bandwidth, run at
    # 0.8 of it: 0.002 + 0.008 / 0.8 = 0.012 ms and 0.002 + 0.016 / 0.8 = 0.022 ms
    stream = torch.tensor([0.008, 0.016], dtype=torch.float64)
    share, err = weight_streaming.best_share(0.002, stream, torch.tensor([0.012, 0.022],
                                                                         dtype=torch.float64))
    assert share == pytest.approx(0.8)
    assert err == pytest.approx(0.0, abs=1e-12)


def test_share_minimizes_the_mean_absolute_percentage_error() -> None:
    # no floor, 1 ms of streaming, measured 2 and 4 ms: a share e prices both at 1/e ms. For
    # 1/e between 2 and 4 the error is ((1/e)/2 - 1 + 1 - (1/e)/4) / 2 = 1 / (8e), least at
    # e = 0.5 (0.25); above 0.5 it is (2 - 3 / (4e)) / 2, 0.2574 at the next step, 0.505
    share, err = weight_streaming.best_share(
        0.0, torch.tensor([1.0, 1.0], dtype=torch.float64),
        torch.tensor([2.0, 4.0], dtype=torch.float64))
    assert share == pytest.approx(0.5)
    assert err == pytest.approx(0.25)


def test_names_the_missing_data_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                       ) -> None:
    with pytest.raises(SystemExit):
        weight_streaming.main(["--data", str(tmp_path), "--out", str(tmp_path / "out.md")])
    assert str(tmp_path / "gemm") in capsys.readouterr().err
