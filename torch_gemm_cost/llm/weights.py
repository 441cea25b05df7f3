"""Quantized weights: the formats a plan prices the linear layers in, which GEMMs carry them,
and a GEMM's record with its weight in a format."""

from __future__ import annotations

from dataclasses import replace

from ..hardware.dtypes import DTYPES
from ..records import GemmSite
from ..records.types import OP_LAYOUT, alignment_bytes, operand_leads

__all__ = ["FP8_DTYPE", "GROUP_SIZE", "WEIGHT_BYTES", "WEIGHT_FORMATS", "is_weight_gemm",
           "quantized"]

GROUP_SIZE = 128  # weights per quantization scale (GPTQ/AWQ's usual group)
WEIGHT_FORMATS: tuple[str, ...] = ("int8", "int4", "fp8")
# bytes per stored weight, its group's 16-bit scale included (GPTQ's symmetric format, which
# vLLM's Marlin and Machete kernels run; fp8 keeps one scale per tensor or channel)
WEIGHT_BYTES: dict[str, float] = {"int8": 1 + 2 / GROUP_SIZE, "int4": 0.5 + 2 / GROUP_SIZE,
                                  "fp8": 1.0}
FP8_DTYPE = "float8_e4m3fn"


def is_weight_gemm(site: GemmSite, lm_head: str, experts: int) -> bool:
    """A forward GEMM whose B is a quantizable weight: the decoder's Linear layers and experts,
    not the lm_head (module ``lm_head``) nor an MoE router (n = ``experts``); vLLM keeps both
    unquantized."""
    if site.phase != "forward" or site.op not in ("linear", "addmm", "conv1d", "grouped_mm"):
        return False
    if site.module == lm_head:
        return False
    return not (experts and site.op != "grouped_mm" and site.n == experts)


def quantized(site: GemmSite, fmt: str | None) -> GemmSite:
    """``site`` with its weight in ``fmt``: int8/int4 stored narrow with group scales and
    dequantized in the main loop (the GEMM stays in the activations' dtype); fp8 weights and
    activations on fp8 tensor cores, in vLLM's CUTLASS scaled-mm (``vllm_cutlass``; on ROCm the
    predictor prices torch._scaled_mm, which vLLM calls there), the input cast by a kernel of
    its own."""
    if fmt is None:
        return site
    in_b = DTYPES[site.dtype].in_bytes
    weight = site.batch * site.k * site.n
    if fmt in ("int8", "int4"):
        b = WEIGHT_BYTES[fmt]
        return replace(site, b_bytes=b, dram_bytes=round(site.dram_bytes - weight * (in_b - b)))
    fp8 = DTYPES[FP8_DTYPE]
    a_align, b_align = site.a_align_bytes, site.b_align_bytes
    if site.op in OP_LAYOUT:
        dims = (site.m, site.n, site.k)
        a_lead, b_lead, _ = operand_leads(site.op)
        a_align = alignment_bytes(dims[a_lead], fp8.in_bytes)
        b_align = alignment_bytes(dims[b_lead], fp8.in_bytes)
    activations = site.batch * site.m * site.k
    return replace(site, dtype=FP8_DTYPE, a_align_bytes=a_align, b_align_bytes=b_align,
                   dram_bytes=site.dram_bytes - (activations + weight) * (in_b - fp8.in_bytes),
                   quantized_elements=activations, fp8_kernel="vllm_cutlass")
