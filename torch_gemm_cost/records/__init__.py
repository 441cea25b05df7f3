"""GEMM records, the handlers that read them off ATen ops (one per op, in a registry that takes
custom ops too) and the walk of a captured graph."""

from .einsum import einsum_gemms, einsum_kernels
from .extract import META_KEY, PHASES, extract
from .handlers import (
    ForwardGemm,
    GemmHandler,
    HandlerContext,
    active_groups,
    causal_kept_entries,
    gemm_handler,
    matrix_layout,
    register_gemm_handler,
)
from .optimizer import OPTIMIZERS, adamw_ops, optimizer_ops, sgd_ops
from .rnn import RNN_GATES, rnn_shape
from .types import DTYPE_NAMES, GemmBatch, GemmSite, OtherOp, alignment_bytes

__all__ = [
    "DTYPE_NAMES",
    "META_KEY",
    "OPTIMIZERS",
    "PHASES",
    "RNN_GATES",
    "ForwardGemm",
    "GemmBatch",
    "GemmHandler",
    "GemmSite",
    "HandlerContext",
    "OtherOp",
    "active_groups",
    "adamw_ops",
    "alignment_bytes",
    "causal_kept_entries",
    "einsum_gemms",
    "einsum_kernels",
    "extract",
    "gemm_handler",
    "matrix_layout",
    "optimizer_ops",
    "register_gemm_handler",
    "rnn_shape",
    "sgd_ops",
]
