"""Compute dtype spellings all meet on one canonical record."""

from __future__ import annotations

import pytest
import torch

from torch_gemm_cost.hardware.dtypes import DTYPES, resolve_dtype


@pytest.mark.parametrize(
    "spelling, name",
    [
        (torch.bfloat16, "bfloat16"),
        ("bfloat16", "bfloat16"),
        ("bf16", "bfloat16"),
        ("torch.bfloat16", "bfloat16"),
        (torch.float16, "float16"),
        ("half", "float16"),
        ("fp32", "float32"),
        ("tf32", "tf32"),
        ("fp8", "float8_e4m3fn"),
        (torch.float8_e5m2, "float8_e5m2"),
        ("int8", "int8"),
    ],
)
def test_spellings(spelling, name):
    assert resolve_dtype(spelling).name == name


def test_every_data_dtype_is_known():
    # The dtype column of DATA.md.
    for name in (
        "float32", "tf32", "float16", "bfloat16", "bfloat16_f32out", "float16_fp32math", "int8",
        "float8_e4m3fn", "float8_e4m3fn_e5m2", "float8_e5m2_e4m3fn", "float8_e4m3fnuz",
    ):
        assert resolve_dtype(name) is DTYPES[name]


def test_bytes_per_element():
    assert (resolve_dtype("bf16").in_bytes, resolve_dtype("bf16").out_bytes) == (2, 2)
    assert (resolve_dtype("bfloat16_f32out").in_bytes, resolve_dtype("bfloat16_f32out").out_bytes) == (2, 4)
    assert resolve_dtype("fp8").in_bytes == 1


def test_unknown_dtype_suggests_the_nearest():
    with pytest.raises(ValueError, match=r"'bfloat61'.*'bfloat16'"):
        resolve_dtype("bfloat61")
    with pytest.raises(TypeError):
        resolve_dtype(16)  # type: ignore[arg-type]
