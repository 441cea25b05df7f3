"""Architecture facts a datasheet leaves out, by chip or compute capability: the SM's issue
width, L1 and shared memory, dense fp16 FLOPs per clock, and PCIe bandwidth per lane."""

from __future__ import annotations

import re

from .fields import GB

# Warp schedulers per SM and dispatch units per scheduler, from NVIDIA's architecture
# whitepapers: Pascal GP100 (two processing blocks, each a scheduler with two dispatch units)
# and GP104 (four such blocks); from Volta on, four blocks each with one scheduler and one
# dispatch unit (Volta, Turing, GA100, GA102, Ada, Hopper and Blackwell whitepapers). Each
# dispatch issues one instruction for 32 threads a clock, so an SM issues schedulers x dispatch
# x 32 lanes of instructions a clock: twice its FP32 lanes on Pascal, Volta, Turing and GA100,
# exactly its FP32 lanes on GA102, Ada, Hopper and Blackwell, where every load or address
# instruction an SGEMM issues takes a slot from an FMA.
ISSUE_BY_CHIP: dict[str, tuple[int, int]] = {
    "GP100": (2, 2), "GP104": (4, 2), "GV100": (4, 1), "TU104": (4, 1), "GA100": (4, 1),
    "GA102": (4, 1), "AD102": (4, 1), "AD104": (4, 1), "GH100": (4, 1), "GB100": (4, 1),
}
# The same by compute capability, for a chip the table lacks: 6.0 is GP100; 6.1 and 6.2 are
# GP10x like GP104; from 7.0 on every NVIDIA SM is four blocks of one scheduler and one
# dispatch unit (the whitepapers above).
ISSUE_BY_CC: dict[str, tuple[int, int]] = {"6.0": (2, 2), "6.1": (4, 2), "6.2": (4, 2)}
ISSUE_FROM_CC_MAJOR = 7  # and later: (4, 1)
# Combined L1 / shared memory per SM by compute capability (CUDA programming and tuning
# guides, sources.md S20; 12.0 from the programming guide's table of technical specifications
# per compute capability). Pascal's L1 is separate and is left to the predictor.
L1_SMEM_KB_BY_CC: dict[str, float] = {"7.0": 128, "7.5": 96, "8.0": 192, "8.6": 128,
                                      "8.9": 128, "9.0": 256, "10.0": 256, "12.0": 128}
# AMD vector L1 per CU (ROCm's GPU spec table, sources.md S3)
L1_KB_BY_GFX: dict[str, float] = {"gfx908": 16, "gfx90a": 16, "gfx942": 32}
# Dense fp16 FLOPs per clock per SM, the most each compute capability has (sources.md
# "Derived values": Volta/Turing 1024, GA100 2048, GA102/AD10x 1024, GH100 4096, GB100 8192,
# CDNA1/2 1024 per CU, CDNA3 2048). A peak that needs a clock above boost at this rate is not
# dense.
FP16_FLOPS_PER_CLK_BY_CC: dict[str, int] = {
    "7.0": 1024, "7.5": 1024, "8.0": 2048, "8.6": 1024, "8.9": 1024, "9.0": 4096,
    "10.0": 8192, "gfx908": 1024, "gfx90a": 1024, "gfx942": 2048,
}
# PCIe bytes per second per lane and direction as NVIDIA's datasheets round them: 2.5 and
# 5 GT/s with 8b/10b for Gen1/2; 8, 16, 32 GT/s with 128b/130b for Gen3-5 (PCI-SIG); Gen6
# 64 GT/s with FLIT encoding, 128 GB/s per direction at x16 on NVIDIA's sheets.
PCIE_BW_PER_LANE: dict[int, float] = {1: 0.25 * GB, 2: 0.5 * GB, 3: 1 * GB, 4: 2 * GB,
                                      5: 4 * GB, 6: 8 * GB}


def chip_of(chip: str | None) -> str:
    """The die without its packaging note: "Aldebaran (1 GCD)" -> "Aldebaran"."""
    return re.sub(r"\s*\(.*\)$", "", chip or "")


def _issue_lanes(chip: str, cc: str, nvidia: bool) -> tuple[int | None, bool]:
    """(issue lanes per SM, whether compute capability stood in for the chip)."""
    if chip in ISSUE_BY_CHIP:
        schedulers, dispatch = ISSUE_BY_CHIP[chip]
        return schedulers * dispatch * 32, False
    if not nvidia:
        return None, False
    major = cc.split(".")[0]
    if cc in ISSUE_BY_CC:
        schedulers, dispatch = ISSUE_BY_CC[cc]
    elif major.isdigit() and int(major) >= ISSUE_FROM_CC_MAJOR:
        schedulers, dispatch = 4, 1
    else:
        return None, True
    return schedulers * dispatch * 32, True
