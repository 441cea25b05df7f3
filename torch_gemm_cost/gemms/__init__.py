"""GEMM records, the handlers that read them off ATen ops, the walk of a captured graph, and
measured GEMMs from the data's schema."""

from .extract import META_KEY, PHASES, extract
from .handlers import active_groups, causal_kept_entries, einsum_gemms
from .records import DTYPE_NAMES, GemmBatch, GemmSite, OtherOp, alignment_bytes

__all__ = [
    "DTYPE_NAMES",
    "META_KEY",
    "PHASES",
    "GemmBatch",
    "GemmSite",
    "OtherOp",
    "active_groups",
    "alignment_bytes",
    "causal_kept_entries",
    "einsum_gemms",
    "extract",
]
