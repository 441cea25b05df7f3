"""benchmarks/weight_streaming.py: the working-set bins by hand, and a clear error without data."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from torch_gemm_cost.devices import get_device

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


def test_names_the_missing_data_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                       ) -> None:
    with pytest.raises(SystemExit):
        weight_streaming.main(["--data", str(tmp_path), "--out", str(tmp_path / "out.md")])
    assert str(tmp_path / "gemm") in capsys.readouterr().err
