"""The class of a non-GEMM op (view, copy, norm, elementwise, softmax, reduction, embedding,
other), by its ATen op name, trailing "_" of in-place ops stripped; and the class a report
sums its time under (``TIME_CLASSES``, ``time_class_of``)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from .types import DepthwiseShape, OtherOp

_CLASSES: dict[str, tuple[str, ...]] = {
    "view": (
        "view",
        "_unsafe_view",
        "reshape",
        "expand",
        "expand_as",
        "permute",
        "transpose",
        "t",
        "unsqueeze",
        "squeeze",
        "slice",
        "select",
        "alias",
        "detach",
        "as_strided",
        "split",
        "split_with_sizes",
        "chunk",
        "unbind",
        "narrow",
        "unflatten",
        "flatten",
        "view_as",
        "movedim",
        "diagonal",
        "lift_fresh",
        "lift_fresh_copy",
        "_assert_tensor_metadata",
        "sym_size",
        "sym_stride",
        "sym_numel",
        "numpy_T",
        "_reshape_alias",
        "real",
        "imag",
        "resolve_conj",
        "resolve_neg",
        "empty",
        "empty_like",
        "new_empty",
        "empty_strided",
        "set_grad_enabled",
        "view_as_complex",
        "view_as_real",
        # views that move 0 bytes, as a view does, though their names say otherwise:
        # unsafe_split/_chunk are split and chunk without the aliasing checks (an RNN cell's
        # gates), Tensor.unfold is a strided window view (ViT's patches), not im2col
        "unsafe_split",
        "unsafe_split_with_sizes",
        "unsafe_chunk",
        "unfold",
    ),
    "copy": (
        "clone",
        "contiguous",
        "_to_copy",
        "to",
        "copy",
        "cat",
        "stack",
        "repeat",
        "repeat_interleave",
        "constant_pad_nd",
        "pad",
        "roll",
        "flip",
        "type_as",
        "_unsafe_index",
        "masked_scatter",
        "index_put",
        "slice_scatter",
        "select_scatter",
        "scatter",
        "new_tensor",
        "tile",
        "diag_embed",  # reads the (…, n) diagonal, writes the whole (…, n, n) matrix
        "diag",
        # resampling reads the input and writes the resized output (a UNet's upsamplers)
        "upsample_nearest1d",
        "upsample_nearest2d",
        "upsample_nearest3d",
        "_upsample_nearest_exact1d",
        "_upsample_nearest_exact2d",
        "_upsample_nearest_exact3d",
        "upsample_linear1d",
        "upsample_bilinear2d",
        "upsample_bicubic2d",
        "upsample_trilinear3d",
    ),
    "norm": (
        "native_layer_norm",
        "layer_norm",
        "rms_norm",
        "_fused_rms_norm",
        "group_norm",
        "native_group_norm",
        "batch_norm",
        "native_batch_norm",
        "_native_batch_norm_legit",
        "_native_batch_norm_legit_no_training",
        "instance_norm",
    ),
    "elementwise": ("dropout", "native_dropout", "feature_dropout", "alpha_dropout", "bernoulli",
                    "floor_divide", "tril", "triu", "polar", "exponential", "uniform", "normal",
                    "rand_like", "randn_like", "randint_like", "__and__", "__or__", "__xor__",
                    # torch.where(mask) and nonzero: one pass over the mask, indices out
                    "where", "nonzero",
                    "glu",  # one half of the input times the sigmoid of the other
                    # pointwise, though not tagged so: x·relu6(x + 3)/6 (its backward too)
                    "hardswish", "hardswish_backward",
                    # depthwise convolutions (the GEMM handler declines them): each output
                    # reads a few neighbours of one channel, a stencil (``depthwise_shape``)
                    "convolution", "_convolution", "conv1d", "conv2d", "conv3d",
                    "conv_transpose1d", "conv_transpose2d", "conv_transpose3d"),
    "softmax": ("softmax", "_softmax", "log_softmax", "_log_softmax", "_safe_softmax"),
    "reduction": (
        "sum",
        "mean",
        "amax",
        "amin",
        "max",
        "min",
        "argmax",
        "argmin",
        "prod",
        "var",
        "std",
        "var_mean",
        "std_mean",
        "norm",
        "linalg_vector_norm",
        "cumsum",
        "cumprod",
        "logsumexp",
        "any",
        "all",
        "count_nonzero",
        "topk",
        "sort",
        "diff",
        "histc",
        "bincount",
        "_is_all_true",  # torch._check on a tensor (LLaVA's image-token count)
        # losses: one pass over input and target, the mean (or the elementwise loss) written
        "smooth_l1_loss",
        "huber_loss",
        "_is_any_true",
        # pooling reads its input once and writes the pooled output
        "max_pool1d",
        "max_pool2d",
        "max_pool3d",
        "max_pool2d_with_indices",
        "max_pool3d_with_indices",
        "avg_pool1d",
        "avg_pool2d",
        "avg_pool3d",
        "adaptive_avg_pool1d",
        "adaptive_avg_pool2d",
        "adaptive_avg_pool3d",
        "_adaptive_avg_pool2d",
        "_adaptive_avg_pool3d",
        "adaptive_max_pool1d",
        "adaptive_max_pool2d",
        "adaptive_max_pool3d",
    ),
    "embedding": ("embedding", "index", "index_select", "gather", "take_along_dim"),
}
_OP_CLASS: dict[str, str] = {name: cls for cls, names in _CLASSES.items() for name in names}

# What a report sums non-GEMM time under, in the order it lists them: key -> what it says.
TIME_CLASSES: dict[str, str] = {
    "normalization": "normalization",
    "softmax": "softmax",
    "elementwise": "elementwise and activations",
    "embedding": "embedding and gather",
    "attention": "attention kernels",
    "copy": "copies and layout",
    "reduction": "reductions",
    "optimizer": "optimizer",
    "other": "other",
}
# a norm module's class name: LayerNorm, LlamaRMSNorm, GroupNorm, BatchNorm2d, T5LayerNorm
_NORM_MODULE = re.compile(r"(Layer|RMS|Group|Batch|Instance)Norm|Norm(\dd)?$")
# each op class of ``_CLASSES`` (and OtherOp's "attention" and "other") under its time class
_TIME_CLASS: dict[str, str] = {
    "norm": "normalization",
    "softmax": "softmax",
    "elementwise": "elementwise",
    "embedding": "embedding",
    "attention": "attention",
    "copy": "copy",
    "view": "copy",  # free where it is a view; a layout change where a kernel runs it
    "reduction": "reduction",
    "other": "other",
}


def time_class_of(op: OtherOp) -> str:
    """The ``TIME_CLASSES`` key a report sums ``op``'s time under: ``optimizer`` for the
    optimizer's step, ``attention`` for an SDPA call (forward or backward, its fused kernel
    or its on-chip softmax), ``normalization`` for every op run inside a norm module (an
    RMSNorm written as a cast, pow, mean, rsqrt and mul: ``LlamaRMSNorm``, ``T5LayerNorm``),
    else by its op class."""
    if op.phase == "optimizer":
        return "optimizer"
    if op.attention is not None or op.op.endswith("scaled_dot_product_attention"):
        return "attention"
    if _NORM_MODULE.search(op.module_type):
        return "normalization"
    return _TIME_CLASS.get(op.op_class, "other")
_NO_GRAD = {
    "detach",
    "argmax",
    "argmin",
    "_assert_tensor_metadata",
    "zeros_like",
    "ones_like",
    "full_like",
    "empty_like",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "sign",
}
_FACTORY = {
    "arange",
    "zeros",
    "ones",
    "full",
    "empty",
    "new_ones",
    "new_zeros",
    "new_full",
    "scalar_tensor",
    "rand",
    "randn",
    "randint",
    "zeros_like",
    "ones_like",
    "full_like",
    "tril_indices",
    "triu_indices",
    "linspace",
    "eye",
}


def op_class_of(node: Any, base: str, in_vals: Sequence[torch.Tensor],
                outs: Sequence[torch.Tensor]) -> str:
    """The class of non-GEMM ``node`` (its ATen op name ``base``, trailing "_" stripped), from
    its inputs' and outputs' values: by ``_CLASSES``, else ``elementwise`` for a pointwise or
    factory op, else ``other``; an einsum the GEMM handler declined by what it contracts, and a
    conversion that returns its input a view."""
    op_class = _OP_CLASS.get(base, "elementwise" if _elementwise(node, base) else "other")
    if base == "einsum" and in_vals:  # one the GEMM handler declined: it contracts nothing
        op_class = _einsum_class(in_vals, outs[0])
    if (
        op_class == "copy"
        and base in ("contiguous", "to", "_to_copy", "clone", "type_as")
        and in_vals
    ):
        src, dst = in_vals[0], outs[0]
        same = src.dtype == dst.dtype and src.device == dst.device
        if same and base != "clone" and (base != "contiguous" or src.is_contiguous()):
            op_class = "view"  # a no-op conversion returns its input
    return op_class


def _einsum_class(inputs: Sequence[torch.Tensor], out: torch.Tensor) -> str:
    """The class of an einsum with no contraction: a permutation of one operand (DiT's
    unpatchify) is a view, one that sums letters away a reduction, a product of several
    operands elementwise."""
    if len(inputs) > 1:
        return "elementwise"
    return "view" if out.numel() == inputs[0].numel() else "reduction"


def _elementwise(node: Any, base: str) -> bool:
    if base in _FACTORY:
        return True
    tags = getattr(node.target, "tags", ())
    return torch.Tag.pointwise in tags



_ROW_OPS = frozenset({"softmax", "_softmax", "log_softmax", "_log_softmax", "_safe_softmax",
                      "native_layer_norm", "layer_norm"})
_STATS_NORMS = frozenset({"native_batch_norm", "_native_batch_norm_legit", "batch_norm",
                          "native_group_norm", "group_norm", "instance_norm"})


def row_elems_of(base: str, args: Mapping[str, Any], x: torch.Tensor | None) -> int:
    """Elements of one row of a row-wise op (``base``: softmax and layer norm, whose kernels
    run a block per row) on input ``x`` with bound arguments ``args``; for a norm that computes
    its statistics, the elements of one channel (batch and instance norm) or one group (group
    norm), which its statistics kernel reduces in a block of its own; 0 for any other op."""
    if not isinstance(x, torch.Tensor) or x.dim() == 0:
        return 0
    if computes_stats(base, args):
        groups = args.get("group", args.get("num_groups"))
        if not x.numel() or x.dim() < (2 if isinstance(groups, int) else 3):
            return 0  # a (N, C) batch norm: its statistics kernel tiles both dims (channels last)
        rows = x.shape[0] * int(groups) if isinstance(groups, int) else x.shape[1]
        if base == "instance_norm":
            rows = x.shape[0] * x.shape[1]
        return x.numel() // max(rows, 1)
    if base not in _ROW_OPS:
        return 0
    if "normalized_shape" in args:
        return math.prod(int(s) for s in args["normalized_shape"] or ()) or 1
    dim = args.get("dim")
    return int(x.shape[int(dim) if isinstance(dim, int) else -1])


def computes_stats(base: str, args: Mapping[str, Any]) -> bool:
    """Whether a norm ``base`` computes its statistics from its input: a batch (and instance)
    norm in training mode, a group norm always."""
    if base not in _STATS_NORMS:
        return False
    return bool(args.get("training", True)) if "training" in args else True


CONVOLUTIONS = frozenset({"convolution", "_convolution", "conv1d", "conv2d", "conv3d"})


def depthwise_shape(base: str, args: Mapping[str, Any],
                    tensor: Callable[[Any], Any]) -> DepthwiseShape | None:
    """The shape of convolution ``base`` (bound arguments ``args``, whose tensors ``tensor``
    resolves) where PyTorch runs it in its own depthwise CUDA kernel, as its dispatch
    (``aten/src/ATen/native/Convolution.cpp``: ``is_depthwise``) picks it: not transposed, one
    input channel per group, more than one group, output channels a multiple of the input's,
    a 1D convolution viewed as 2D; None for any other. NB: ``use_cudnn_depthwise`` takes it to
    cuDNN instead for a channels-last input (None here too) and for some fp16 shapes, which
    ``predict.stencil`` leaves to its class's pricing."""
    if base not in CONVOLUTIONS or bool(args.get("transposed") or False):
        return None
    x, w = tensor(args.get("input")), tensor(args.get("weight"))
    if not isinstance(x, torch.Tensor) or not isinstance(w, torch.Tensor) or w.dim() < 3:
        return None
    nd = w.dim() - 2
    groups = int(args.get("groups") or 1)
    c_in = int(x.shape[-nd - 1])
    if groups < 2 or c_in != groups or int(w.shape[0]) % c_in or int(w.shape[1]) != 1:
        return None
    last = {2: torch.channels_last, 3: torch.channels_last_3d}.get(nd)
    if (last is not None and x.dim() == nd + 2 and not x.is_contiguous()
            and x.is_contiguous(memory_format=last)):
        return None  # channels last: cuDNN's
    kernel = tuple(int(k) for k in w.shape[2:])
    return DepthwiseShape((1, *kernel) if nd == 1 else kernel, int(w.shape[0]) // c_in)
