"""The schema of a spec record: its fields (gpus.json's, and the catalog's extensions), each with
its unit, plausible range and fallback, the units they are written in, and the errors a record
raises."""

from __future__ import annotations

from dataclasses import dataclass

MB = 1 << 20  # gpus.json's "mb" of caches is MiB (B200: 129536 KiB -> 126.5)
KB = 1 << 10
GB = 1e9  # bandwidth is decimal (3350 GB/s)
# memory size is binary: a vendor's "80 GB" of HBM or GDDR is 80 GiB (torch.cuda reports an H100
# SXM5 at 79.2 GiB, the rest held by the driver; an MI300X's "192 GB" at 191.7 GiB)
GIB = 1 << 30
TFLOPS = 1e12


class SpecError(ValueError):
    """A spec record that cannot describe a GPU: every problem, each on a line of its own."""


class SpecFallbackWarning(UserWarning):
    """A spec file left out optional facts; the warning lists what was used instead."""



@dataclass(frozen=True)
class SpecField:
    """One field of a spec record.

    ``role``: ``required``; ``optional`` (absent or null falls back as ``fallback`` says);
    ``extension`` (optional, and not in gpus.json: the catalog keeps it in a table of
    scripts/build_catalog.py); ``check`` (read only to check other fields); ``ignored``
    (gpus.json carries it, the predictor does not read it; type-checked only).
    ``lo``..``hi`` is the plausible range in ``unit``; ``misread`` lists (factor, unit) pairs:
    a value out of range that lands in range times ``factor`` was likely written in ``unit``.
    """

    name: str
    kind: str  # "str", "int", "float", "bool", "list"
    role: str
    unit: str = ""
    help: str = ""
    lo: float | None = None
    hi: float | None = None
    misread: tuple[tuple[float, str], ...] = ()
    fallback: str = ""


_TFLOPS_MISREAD = ((1e-3, "GFLOP/s"), (1e-12, "FLOP/s"), (1e3, "PFLOP/s"))
_CLOCK_MISREAD = ((1e3, "GHz"), (1e-6, "Hz"), (1e-3, "kHz"))
_KIB_MISREAD = ((1 / KB, "bytes"), (KB, "MiB"))


def _peak(name: str, what: str, lo: float, hi: float, role: str = "optional") -> SpecField:
    unit = "TOP/s" if "tops" in name else "TFLOP/s"
    misread = tuple((f, u.replace("FLOP", "OP") if unit == "TOP/s" else u)
                    for f, u in _TFLOPS_MISREAD)
    return SpecField(name, "float", role, f"{unit}, dense", f"{what}, dense (no 2:4 sparsity)",
                     lo, hi, misread, "the device lacks this rate: a GEMM in it is priced on "
                     "the path that runs instead (tf32 and bf16 at the fp32 rate), or refused "
                     "(fp8, int8)")


# Plausible ranges. Each spans the catalog's smallest and largest GPU (a 75 W Tesla P4 to a
# B200, MI300X and MI355X) with room for a generation or two either side, and is narrow
# enough that the usual slip, a figure in a unit 1000 or 1024 times off, lands outside it.
SPEC_FIELDS: tuple[SpecField, ...] = (
    SpecField("id", "str", "required", "", "a short id of your choosing (lowercase, digits, _), "
              "not a catalog id"),
    SpecField("name", "str", "required", "", "the product name, e.g. 'NVIDIA RTX PRO 6000'"),
    SpecField("vendor", "str", "required", "", "'NVIDIA' or 'AMD'"),
    SpecField("architecture", "str", "required", "", "'Ampere', 'Ada', 'Hopper', 'Blackwell', "
              "'CDNA3', ..."),
    SpecField("chip", "str", "optional", "", "the die, e.g. 'GH100', 'AD102' (a note in "
              "parentheses is dropped); sets the SM's issue width", fallback="issue width from "
              "compute_capability"),
    SpecField("form_factor", "str", "optional", "", "e.g. 'SXM5 700W': the board power is read "
              "from the 'NNNW' in it unless tdp_w is given"),
    SpecField("compute_capability", "str", "required", "", "NVIDIA 'major.minor' ('9.0'); AMD "
              "the LLVM target ('gfx942')"),
    SpecField("sm_unit", "str", "ignored", "", "'SM' (NVIDIA) or 'CU' (AMD)"),
    # SMs: 20 on a P4, 304 CUs on an MI300X; a count in the thousands is CUDA cores
    SpecField("sm_count", "int", "required", "SMs or CUs", "streaming multiprocessors "
              "(AMD compute units), not CUDA cores", 1, 1024, ((1 / 128, "CUDA cores, 128 per SM"),
                                                               (1 / 64, "CUDA cores, 64 per SM"))),
    # clocks: 585 MHz (T4 base) to 2520 MHz (Ada boost)
    SpecField("boost_clock_mhz", "float", "required", "MHz", "the boost (maximum) clock",
              300, 4000, _CLOCK_MISREAD),
    SpecField("base_clock_mhz", "float", "extension", "MHz", "the clock the board guarantees at "
              "its power limit on a heavy load (NVIDIA's 'base clock'); must not exceed boost",
              100, 4000, _CLOCK_MISREAD, "no clock drop under the power limit: power-bound "
              "boards (an L40S holds 1110 of 2520 MHz) come out too fast"),
    SpecField("gemm_clock_mhz", "float", "extension", "MHz", "the clock the board holds "
              "running a dense GEMM flat out at its power limit, where the vendor publishes it "
              "(AMD: the median clock of its Max-Achievable FLOPs runs); must not exceed boost",
              100, 4000, _CLOCK_MISREAD, "none: a board without a base clock keeps its boost "
              "clock under any GEMM"),
    SpecField("board_class", "str", "extension", "", "who the board is built for: "
              "'datacenter', 'workstation' (RTX A6000, RTX PRO 6000) or 'geforce': a GeForce "
              "card's rated boost clock is a typical one that it exceeds under load while power "
              "and temperature allow", fallback="from the name: 'geforce' where it says GeForce, "
              "'workstation' for RTX A/PRO and Quadro boards, otherwise 'datacenter'"),
    SpecField("tensor_peak_implied_clock_mhz", "float", "check", "MHz", "the clock the dense "
              "fp16 peak implies (gpus.json derives it); checked against boost_clock_mhz, not "
              "read by the predictor", 100, 4000, _CLOCK_MISREAD),
    # FP32 lanes per SM: 64 (GA100, Volta, CDNA) or 128 (Pascal GP104, GA102, Ada, Hopper)
    SpecField("cuda_cores_per_sm", "int", "optional", "lanes per SM", "FP32 (CUDA-core) lanes "
              "per SM", 8, 512, fallback="NVIDIA: peak_tflops_fp32 / (2 * sm_count * boost "
              "clock), to a multiple of 32; AMD: none (issue never binds)"),
    SpecField("tensor_cores_per_sm", "int", "optional", "per SM", "tensor cores per SM (0: "
              "none); AMD matrix cores are used whatever it says", 0, 64,
              fallback="NVIDIA: 8 on compute capability 7.x, 4 from 8.0, 0 before 7.0; AMD: 0"),
    SpecField("issue_lanes_per_sm", "int", "extension", "lanes per clock", "instruction lanes "
              "an SM issues a clock (schedulers x dispatch units x 32)", 32, 1024,
              fallback="from chip, else from compute_capability (NVIDIA whitepapers); AMD: "
              "none (issue never binds)"),
    SpecField("fp16_dense_flops_per_clk_per_sm", "int", "check", "FLOP/clk/SM", "dense fp16 "
              "FLOPs per clock per SM; checks peak_tflops_fp16", 16, 65536),
    # peaks: P4 fp64 0.17 and fp32 5.5 TFLOP/s up to MI355X fp8 5033
    _peak("peak_tflops_fp64", "FP64", 0.005, 1000),
    SpecField("peak_tflops_fp64_tensor", "float", "ignored", "TFLOP/s", "FP64 on tensor "
              "cores", 0.005, 2000, _TFLOPS_MISREAD),
    _peak("peak_tflops_fp32", "FP32 on CUDA cores (vector units)", 0.1, 1000, "required"),
    _peak("peak_tflops_fp32_matrix", "FP32 on AMD matrix cores", 0.1, 2000),
    _peak("peak_tflops_tf32", "TF32 tensor", 0.1, 20000),
    _peak("peak_tflops_fp16", "FP16 tensor, fp32 accumulate", 0.1, 50000),
    SpecField("peak_tflops_fp16_fp16acc", "float", "ignored", "TFLOP/s", "FP16 tensor with "
              "fp16 accumulate", 0.1, 50000, _TFLOPS_MISREAD),
    _peak("peak_tflops_bf16", "BF16 tensor", 0.1, 50000),
    _peak("peak_tflops_fp8", "FP8 tensor", 0.1, 100000),
    SpecField("peak_tflops_fp8_fp16acc", "float", "ignored", "TFLOP/s", "FP8 with fp16 "
              "accumulate", 0.1, 100000, _TFLOPS_MISREAD),
    _peak("peak_tops_int8", "INT8 tensor (or DP4A)", 0.1, 100000),
    # FP4 (NVFP4 and MXFP4 on Blackwell's tensor cores): B200 9000 TFLOP/s dense
    _peak("peak_tflops_fp4", "FP4 tensor (NVFP4/MXFP4 blocks)", 0.1, 200000),
    # memory: 8 GB (P4) to 288 GB (MI355X); DRAM bandwidth 192 GB/s (P4) to 8000 GB/s (MI355X)
    SpecField("mem_gb", "float", "optional", "GB", "memory size as the vendor writes it (an "
              "'80 GB' board: 80; read as GiB)", 0.5, 4096,
              ((1 / 1024, "MiB"), (1 / GIB, "bytes"))),
    SpecField("mem_type", "str", "ignored", "", "'HBM3', 'GDDR6', ..."),
    SpecField("mem_bw_gbps", "float", "required", "GB/s", "DRAM bandwidth in GB/s (not "
              "gigabits)", 50, 20000, ((1e3, "TB/s"), (1e-3, "MB/s"), (1e-9, "bytes/s"))),
    # caches: L2 2 MiB (P4) to 126.5 MiB (B200); L3 (AMD Infinity Cache) up to 256 MiB
    SpecField("l2_mb", "float", "required", "MiB", "L2 cache", 0.25, 1024,
              ((1 / KB, "KiB"), (1 / MB, "bytes"))),
    SpecField("l3_mb", "float", "optional", "MiB", "last-level cache beyond L2 (AMD Infinity "
              "Cache); null: none", 1, 4096, ((1 / KB, "KiB"), (1 / MB, "bytes"))),
    # per-SM storage: L1 16 KiB (CDNA CU) to 256 KiB (Hopper); register file 256-512 KiB
    SpecField("l1_smem_per_sm_kb", "float", "optional", "KiB", "NVIDIA: combined L1 / shared "
              "memory per SM", 8, 1024, _KIB_MISREAD, "from compute_capability (CUDA guide: "
              "7.0 128, 7.5 96, 8.0 192, 8.6/8.9/12.0 128, 9.0/10.0 256); otherwise the "
              "predictor's 24 KiB (Pascal's separate L1)"),
    SpecField("l1_vector_cache_per_cu_kb", "float", "optional", "KiB", "AMD: vector L1 per CU",
              4, 1024, _KIB_MISREAD, "AMD: from compute_capability (ROCm: gfx908/gfx90a 16, "
              "gfx942 32); otherwise the predictor's 24 KiB"),
    SpecField("smem_max_per_sm_kb", "float", "optional", "KiB", "shared memory (LDS) per SM",
              0, 1024, _KIB_MISREAD),
    SpecField("smem_max_per_block_kb", "float", "ignored", "KiB", "shared memory per block",
              0, 1024, _KIB_MISREAD),
    SpecField("smem_default_per_block_kb", "float", "ignored", "KiB", "default shared memory "
              "per block", 0, 1024, _KIB_MISREAD),
    SpecField("regfile_per_sm_kb", "float", "optional", "KiB", "register file per SM", 16,
              4096, _KIB_MISREAD, "the predictor's 256 KiB (every NVIDIA SM since Kepler)"),
    # board power: 70 W (T4) to 1400 W (MI355X)
    SpecField("tdp_w", "float", "extension", "W", "board power; overrides the 'NNNW' of "
              "form_factor", 5, 3000, ((1e3, "kW"),)),
    SpecField("tensor_figures_are_dense", "bool", "check", "", "must be true: every peak here "
              "is dense; put with-sparsity figures in peak_tflops_*_sparse"),
    SpecField("sparsity_2_4_supported", "bool", "ignored"),
    SpecField("sparsity_doubles_tensor_peak", "bool", "ignored"),
    SpecField("datasheet_tensor_figures_sparse_only", "bool", "ignored"),
    *(SpecField(f"{p}_sparse", "float", "extension", f"{u}, with 2:4 sparsity",
                f"the datasheet's with-sparsity figure; only checks {p} (dense = half), or "
                f"gives it when {p} is null", lo, hi, misread)
      for p, u, lo, hi, misread in (
          ("peak_tflops_tf32", "TFLOP/s", 0.2, 40000, _TFLOPS_MISREAD),
          ("peak_tflops_fp16", "TFLOP/s", 0.2, 100000, _TFLOPS_MISREAD),
          ("peak_tflops_bf16", "TFLOP/s", 0.2, 100000, _TFLOPS_MISREAD),
          ("peak_tflops_fp8", "TFLOP/s", 0.2, 200000, _TFLOPS_MISREAD),
          ("peak_tops_int8", "TOP/s", 0.2, 200000,
           tuple((f, u.replace("FLOP", "OP")) for f, u in _TFLOPS_MISREAD)))),
    SpecField("aliases", "list", "extension", "", "names torch.cuda.get_device_name() returns"),
    # interconnect, per GPU and one direction (a datasheet's bidirectional figure halved)
    SpecField("peer_link", "str", "extension", "", "GPU-to-GPU link, e.g. 'NVLink 4'; null: "
              "PCIe only"),
    SpecField("peer_links", "int", "extension", "links", "GPU-to-GPU links per GPU", 0, 64),
    # NVLink: 56.25 GB/s (GA102 bridge) to 900 GB/s (NVLink 5) one direction
    SpecField("peer_link_bw_gbps", "float", "extension", "GB/s, one direction", "all peer "
              "links together", 1, 10000, ((1e3, "TB/s"), (1 / 8, "Gb/s"))),
    SpecField("node_fabric", "str", "extension", "", "'nvswitch', 'nvlink_pairs', 'mesh' or "
              "'pcie'"),
    SpecField("node_gpus", "int", "extension", "GPUs", "GPUs in the usual node", 1, 1024),
    SpecField("pcie_generation", "int", "extension", "generation", "PCIe generation (1-6)", 1,
              6),
    SpecField("pcie_lanes", "int", "extension", "lanes", "PCIe lanes (16 when a generation is "
              "given without lanes)", 1, 32),
    SpecField("network", "str", "extension", "", "the usual node's inter-node network"),
    SpecField("network_bw_gbps", "float", "extension", "GB/s, one direction", "that network's "
              "share per GPU (a NIC's Gb/s over 8)", 0.1, 1000, ((1 / 8, "Gb/s"),)),
    SpecField("interconnect_uncertain", "list", "extension", "", "interconnect values not "
              "cross-checked"),
    SpecField("interconnect_sources", "list", "extension", "", "where the interconnect facts "
              "come from"),
    SpecField("notes", "list", "optional", "", "free text"),
    SpecField("sources", "list", "ignored", "", "source ids (gpus.json's sources.md)"),
    SpecField("_uncertain", "list", "optional", "", "fields whose values were not "
              "cross-checked"),
)
FIELDS: dict[str, SpecField] = {f.name: f for f in SPEC_FIELDS}
# a record with any of these is a spec record (a profile has none of them at its top level)
_SPEC_MARKERS = ("sm_count", "mem_bw_gbps", "peak_tflops_fp32", "boost_clock_mhz", "l2_mb")

# DeviceSpec peak key -> spec field
PEAK_FIELDS: dict[str, str] = {
    "fp64": "peak_tflops_fp64", "fp32": "peak_tflops_fp32",
    "fp32_matrix": "peak_tflops_fp32_matrix", "tf32": "peak_tflops_tf32",
    "fp16": "peak_tflops_fp16", "bf16": "peak_tflops_bf16", "fp8": "peak_tflops_fp8",
    "int8": "peak_tops_int8", "fp4": "peak_tflops_fp4",
}
VENDORS = ("NVIDIA", "AMD")
NODE_FABRICS = ("nvswitch", "nvlink_pairs", "mesh", "pcie")


def _fmt(value: float) -> str:
    """A number as a person writes it: 3350, 0.17, 52428800 (no exponent below 1e15)."""
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.6g}"
