"""Quantized weights: the formats a plan prices the linear layers in, which GEMMs carry them,
and a GEMM's record with its weight in a format."""

from __future__ import annotations

from dataclasses import replace

from ..hardware.catalog import DeviceSpec
from ..hardware.dtypes import DTYPES
from ..records import GemmSite
from ..records.types import OP_LAYOUT, alignment_bytes, operand_leads

__all__ = ["FP4_BLOCK", "FP4_FORMATS", "FP8_DTYPE", "GROUP_SIZE", "WEIGHT_BYTES",
           "WEIGHT_FORMATS", "fp4_device", "is_weight_gemm", "quantized"]

GROUP_SIZE = 128  # weights per quantization scale (GPTQ/AWQ's usual group; w4a8's too)
WEIGHT_FORMATS: tuple[str, ...] = ("int8", "int4", "fp8", "w4a8", "nvfp4", "mxfp4")
FP4_FORMATS: tuple[str, ...] = ("nvfp4", "mxfp4")  # weights and activations on fp4 tensor cores
# elements per block scale: NVFP4 one fp8 (e4m3) scale per 16, MXFP4 (OCP MX) one 8-bit
# power-of-two (e8m0) scale per 32; each tensor's one fp32 scale is not counted
FP4_BLOCK: dict[str, int] = {"nvfp4": 16, "mxfp4": 32}
# bytes per stored weight, its group's scale included: GPTQ's symmetric format with a 16-bit
# scale a group (int8, int4, which vLLM's Marlin and Machete kernels run; w4a8's int4 weights
# alike); fp8 keeps one scale per tensor or channel; fp4 4 bits and an 8-bit block scale:
# nvfp4 4 + 8/16 = 4.5 bits, mxfp4 4 + 8/32 = 4.25 bits
WEIGHT_BYTES: dict[str, float] = {"int8": 1 + 2 / GROUP_SIZE, "int4": 0.5 + 2 / GROUP_SIZE,
                                  "fp8": 1.0, "w4a8": 0.5 + 2 / GROUP_SIZE,
                                  "nvfp4": 0.5 + 1 / FP4_BLOCK["nvfp4"],
                                  "mxfp4": 0.5 + 1 / FP4_BLOCK["mxfp4"]}
FP8_DTYPE = "float8_e4m3fn"


def fp4_device(spec: DeviceSpec) -> DeviceSpec:
    """``spec`` with its fp4 tensor peak as its fp8 one: an fp4 GEMM is priced as the GEMM
    predictor prices an fp8 one (its nearest fitted precision, CUTLASS's scaled GEMM) at the
    fp4 rate. A device without an fp4 rate raises."""
    fp4 = spec.peak("fp4")
    if fp4 is None:
        raise ValueError(f"{spec.id} has no fp4 tensor cores")
    return replace(spec, peak_flops=tuple((k, fp4 if k == "fp8" else v)
                                          for k, v in spec.peak_flops))


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
    its own; w4a8 as fp8 with its int4 weights read narrow (CUTLASS's mixed-input GEMM
    converts them in the main loop); nvfp4/mxfp4 as fp8 with both operands read at their fp4
    size and block scales (the fp4 tensor cores' rate is ``fp4_device``'s)."""
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
    a_b = WEIGHT_BYTES[fmt] if fmt in FP4_FORMATS else float(fp8.in_bytes)
    b_b = WEIGHT_BYTES[fmt] if fmt != "fp8" else float(fp8.in_bytes)
    return replace(site, dtype=FP8_DTYPE, a_align_bytes=a_align, b_align_bytes=b_align,
                   dram_bytes=round(site.dram_bytes - activations * (in_b - a_b)
                                    - weight * (in_b - b_b)),
                   b_bytes=None if fmt == "fp8" else b_b,
                   quantized_elements=activations, fp8_kernel="vllm_cutlass")
