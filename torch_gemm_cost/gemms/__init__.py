"""GEMM records, the handlers that read them off ATen ops, and the walk of a captured graph."""

from .extract import META_KEY, PHASES, extract
from .handlers import active_groups, causal_kept_entries, einsum_gemms
from .records import GemmSite, OtherOp, alignment_bytes

__all__ = [
    "META_KEY",
    "PHASES",
    "GemmSite",
    "OtherOp",
    "active_groups",
    "alignment_bytes",
    "causal_kept_entries",
    "einsum_gemms",
    "extract",
]
