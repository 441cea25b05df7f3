"""Reading measured GEMMs: alignment from op/layout, every dtype, errors that name the row."""

from __future__ import annotations

import gzip

import pytest
import torch

from torch_gemm_cost.hardware.dtypes import DTYPES
from torch_gemm_cost.measured.gemm import gemm_batch_from_columns, load_gemms, read_gemm_file

HEADER = "gpu,gpu_name,source,timing,op,dtype,batch,m,n,k,bias,layout,latency_ms\n"


def test_alignment_follows_layout() -> None:
    g = gemm_batch_from_columns(
        op=["matmul", "linear", "gemm_NN", "gemm_NT", "gemm_TN"],
        layout=["A@B", "x@W^T", "colmajor_NN", "colmajor_NT", "colmajor_TN"],
        dtype=["float16"] * 5,
        batch=[1] * 5,
        m=[6, 6, 6, 6, 6],
        n=[12, 12, 12, 12, 12],
        k=[5, 5, 5, 5, 5],
        bias=[0, 1, 0, 0, 0],
    )
    # fp16 = 2 bytes: m=6 -> 12 B -> 4; n=12 -> 24 B -> 8; k=5 -> 10 B -> 2
    # A@B: lda=k, ldb=n, ldc=n | x@W^T: k, k, n | NN: m, k, m | NT: m, n, m | TN: k, k, m
    assert g.a_align_bytes.tolist() == [2, 2, 4, 4, 2]
    assert g.b_align_bytes.tolist() == [8, 2, 2, 8, 2]
    assert g.c_align_bytes.tolist() == [8, 8, 4, 4, 4]
    assert g.bias.tolist() == [0, 1, 0, 0, 0]


def test_layout_defaults_from_op_and_caps_at_16() -> None:
    g = gemm_batch_from_columns(
        op=["linear"], dtype=["float32"], batch=["2"], m=["4096"], n=["4096"], k=["4096"]
    )
    assert g.a_align_bytes.tolist() == [16] and g.b_align_bytes.tolist() == [16]
    assert g.batch.tolist() == [2] and g.bias.tolist() == [0]


@pytest.mark.parametrize("name", sorted(DTYPES))
def test_every_dtype_has_its_bytes(name: str) -> None:
    g = gemm_batch_from_columns(op=["bmm"], dtype=[name], batch=[1], m=[8], n=[8], k=[8])
    assert g.in_bytes.item() == DTYPES[name].in_bytes
    assert g.out_bytes.item() == DTYPES[name].out_bytes


@pytest.mark.parametrize(
    "column, value, message",
    [
        ("dtype", "float17", "row 1, column 'dtype'"),
        ("m", "-3", "row 1, column 'm'"),
        ("k", "2.5", "row 1, column 'k'"),
        ("op", "conv", "row 1, column 'op'"),
    ],
)
def test_bad_value_names_row_and_column(column: str, value: str, message: str) -> None:
    cols = {"op": ["bmm", "bmm"], "dtype": ["float32"] * 2, "batch": [1, 1], "m": [8, 8],
            "n": [8, 8], "k": [8, 8]}
    cols[column] = [cols[column][0], value]
    with pytest.raises(ValueError, match=message):
        gemm_batch_from_columns(**cols)


def test_load_names_file_and_line(tmp_path) -> None:
    (tmp_path / "gemm").mkdir()
    rows = HEADER + "t4,T4,x,event,bmm,float32,1,8,8,8,0,A@B,0.03\n" \
        + "t4,T4,x,event,bmm,float32,1,8,8,8,0,A@B,fast\n"
    with gzip.open(tmp_path / "gemm" / "x.csv.gz", "wt") as fh:
        fh.write(rows)
    with pytest.raises(ValueError, match=r"x.csv.gz line 3, column 'latency_ms'"):
        load_gemms(tmp_path)
    with pytest.raises(FileNotFoundError, match="available: x"):
        load_gemms(tmp_path, sources=["vidur"])


def test_load_small_source(data_dir) -> None:
    d = load_gemms(data_dir, sources=["llmcompass"])
    assert len(d) == 42 and set(d.gpu) == {"a100_sxm4_80gb", "mi210"}
    assert set(d.timing) == {"event"} and (d.latency_ms > 0).all()
    sub = d.select(d.mask(gpu="mi210"))
    mask = d.mask(gpu="mi210")
    assert len(sub) == 22 and set(sub.gpu) == {"mi210"}
    assert torch.equal(sub.gemms.m, d.gemms.m[mask])
    assert torch.equal(sub.latency_ms, d.latency_ms[mask])


def test_deepbench_fp16_rows_count_as_padded(tmp_path) -> None:
    """DeepBench padded misaligned fp16 shapes to multiples of 8 before timing (DATA.md): such a
    row's kernels saw 16-byte operands. Other sources and dtypes keep the dims' alignment."""
    (tmp_path / "gemm").mkdir()
    head = "gpu,gpu_name,source,timing,op,dtype,batch,m,n,k,bias,layout,latency_ms\n"
    rows = ["tesla_t4,x,deepbench,kernel,gemm_NN,float16,1,35,7133,1760,0,colmajor_NN,0.4\n",
            "tesla_t4,x,deepbench,kernel,gemm_NN,float32,1,35,7133,1760,0,colmajor_NN,0.4\n",
            "tesla_t4,x,vidur,kernel,linear,float16,1,35,7133,1761,0,x@W^T,0.4\n"]
    with gzip.open(tmp_path / "gemm" / "x.csv.gz", "wt") as fh:
        fh.write(head + "".join(rows))
    g = load_gemms(tmp_path).gemms
    narrowest = torch.minimum(torch.minimum(g.a_align_bytes, g.b_align_bytes), g.c_align_bytes)
    # fp16 padded: 16; fp32 7133 · 4 B = 28532 B -> 4; vidur fp16 k = 1761 · 2 B -> 2
    assert narrowest.tolist() == [16.0, 4.0, 2.0]


def test_aiconfigurator_fp8_rows_carry_vllms_input_cast(tmp_path) -> None:
    """vLLM's fp8 Linear casts its bf16 input to fp8 before the GEMM, and aiconfigurator's fp8
    rows time both: A's batch·m·k elements are cast. Its bf16 rows and other sources' fp8 rows
    (XLA's tables time the GEMM alone) cast nothing."""
    (tmp_path / "gemm").mkdir()
    rows = ["h200_sxm_141gb,x,aiconfigurator,kernel,linear,float8_e4m3fn,1,8,1024,512,0,x@W^T,0.01\n",
            "h200_sxm_141gb,x,aiconfigurator,kernel,linear,bfloat16,1,8,1024,512,0,x@W^T,0.01\n",
            "b200,x,xla-ptable,table,matmul,float8_e4m3fn,2,256,256,512,0,A@B,0.01\n",
            "b200,x,aiconfigurator,kernel,linear,float8_e4m3fn,1,16,64,4096,0,x@W^T,0.01\n"]
    with gzip.open(tmp_path / "gemm" / "x.csv.gz", "wt") as fh:
        fh.write(HEADER + "".join(rows))
    d = load_gemms(tmp_path)
    # 8·512 = 4,096 and 16·4096 = 65,536 elements of A
    assert d.gemms.quantized_elements.tolist() == [4096.0, 0.0, 0.0, 65536.0]
    assert d.quantized_elements is not None
    assert d.select([1, 2]).quantized_elements is None


def test_rows_keep_their_timing_and_a_missing_one_stays_empty(tmp_path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("gpu,op,dtype,batch,m,n,k,latency_ms\nl4,mm,fp16,1,8,8,8,0.01\n")
    assert read_gemm_file(path).timing == ("",)  # priced with the predictor's default
    path.write_text("gpu,timing,op,dtype,batch,m,n,k,latency_ms\nl4,evnt,mm,fp16,1,8,8,8,0.01\n")
    with pytest.raises(ValueError, match=r"t.csv line 2, column 'timing': unknown 'evnt'"):
        read_gemm_file(path)
