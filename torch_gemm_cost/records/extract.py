"""Extraction: a captured graph's GEMM and non-GEMM records, forward and backward.

``extract(captured, dtype, mode=...)`` walks a captured graph (see ``capture``) and returns its
``GemmSite`` and ``OtherOp`` records in execution order, storing each node's records in
``node.meta["torch_gemm_cost"]``. Every spelling counts: ``linear``, ``addmm`` (HF ``Conv1D``
becomes ``conv1d``), ``mm``, ``bmm``, ``baddbmm``, ``addbmm``, ``mv``, ``dot``, ``matmul`` in
every broadcast case, ``einsum`` (per pairwise contraction) and scaled-dot-product attention
(see ``handlers``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import torch

from ..capture.graph import NO_GRAD
from ..hardware.dtypes import DTYPES, ComputeDtype, resolve_dtype
from ..suggest import check_choice, unknown
from .handlers import (
    ForwardGemm,
    HandlerContext,
    attention_shape,
    bind_arguments,
    gemm_handler,
    op_name,
    unique_numel,
)
from .types import GemmSite, OtherOp, alignment_bytes

__all__ = ["META_KEY", "OPTIMIZERS", "PHASES", "adamw_ops", "extract", "optimizer_ops"]

META_KEY = "torch_gemm_cost"  # node.meta[META_KEY]: tuple of the node's GemmSite/OtherOp records
OPERAND_COPY = "operand_copy"  # an OtherOp node name "<gemm node>.operand_copy.<operand node>"
# GEMM ops whose library call reshapes its operands to one batch dim (aten.matmul's
# ``expand(...).reshape(...)``, einsum's and linear's reshapes, bmm's contiguity check)
RESHAPING_GEMMS = frozenset({"matmul", "bmm", "baddbmm", "linear", "einsum"})
PHASES: tuple[str, ...] = ("forward", "backward_dx", "backward_dw", "backward")

class _Ctx:
    """What every record of one extraction shares."""

    def __init__(self, cd: ComputeDtype, native: torch.dtype | None) -> None:
        self.cd = cd
        self.out_name = _out_dtype_name(cd)
        self.act_dtype = cd.torch_dtype if cd.in_bytes >= 2 else torch.bfloat16
        self.act_name = str(self.act_dtype).removeprefix("torch.")
        self.native = native

    def elem_bytes(self, dtype: torch.dtype) -> int:
        if dtype.is_floating_point and (self.native is None or dtype == self.native):
            return self.act_dtype.itemsize
        return dtype.itemsize

    def tensor_bytes(self, t: torch.Tensor) -> int:
        return unique_numel(t) * self.elem_bytes(t.dtype)


def _out_dtype_name(cd: ComputeDtype) -> str:
    """A ``DTYPES`` key whose element size is ``cd``'s output size (int8 -> 4-byte accumulators,
    fp8 -> 16-bit output)."""
    if cd.out_bytes == cd.in_bytes:
        return cd.name
    return {4: "float32", 2: "bfloat16", 8: "float64"}[cd.out_bytes]


# --- non-GEMM op classes, by ATen op name (trailing "_" of in-place ops stripped)

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
                    # depthwise convolutions (the GEMM handler declines them): each output
                    # reads a few neighbours of one channel, a stencil at DRAM speed
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


def _qualified(target: Any) -> str:
    packet = getattr(target, "_overloadpacket", None)
    if packet is not None:
        name = getattr(packet, "_qualified_op_name", "aten::" + op_name(target))
        return str(name).replace("::", ".")
    return getattr(target, "__name__", str(target))


def _tensors(x: Any) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _tensors(v)]
    return []


# --- the walk


def _module_of(node: Any, model_name: str) -> tuple[str, str]:
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return "", model_name
    path, typ = list(stack.values())[-1]
    name = typ.__name__ if isinstance(typ, type) else str(typ).rsplit(".", 1)[-1]
    # a torch.compile'd submodule holds the real one as ``_orig_mod``: name it by its own path
    path = ".".join(p for p in str(path).split(".") if p != "_orig_mod")
    return path, name


def extract(
    captured: Any,
    dtype: str | torch.dtype | ComputeDtype,
    *,
    mode: str = "inference",
    native_dtype: torch.dtype | None = None,
) -> tuple[tuple[GemmSite, ...], tuple[OtherOp, ...]]:
    """GEMM and non-GEMM records of a captured graph, in execution order; annotates each node.

    ``dtype`` is the compute dtype every GEMM runs in. Floating activations of ``native_dtype``
    (the model's own dtype; None: every floating tensor) are costed at that dtype's storage
    size, 16-bit for fp8/int8 compute; other tensors keep their own size.

    A non-GEMM op moves each distinct input once plus its outputs (broadcast dims once);
    views and no-op conversions move nothing; a gather (embedding, index) moves its indices and
    the rows it reads and writes.

    SDPA becomes ``sdpa_qk`` (QKᵀ) and ``sdpa_pv`` (PV) with a ``softmax`` OtherOp between them.
    Its bytes follow a fused (flash) kernel: QKᵀ reads Q and K, PV reads V and writes O, and the
    scores never reach DRAM (only an explicit mask is read). Under ``is_causal`` both GEMMs are
    marked ``causal`` and their FLOPs count only the kept scores, 2·batch·d·kept with
    kept = ``causal_kept_entries(q_len, kv_len)`` (about half).

    ``mode="train"`` adds, in reverse order after the forward pass:

    - per GEMM, the gradient of A (``backward_dx``: dA = dC·Bᵀ) if A needs grad, and of B
      (``backward_dw``: dB = Aᵀ·dC, for a Linear weight dW = dYᵀ·X) if B needs grad, as PyTorch's
      autograd formulas compute them. Attention: dQ, dK, dP and dV, with the causal discount.
    - per non-view op whose output needs grad, an OtherOp with phase ``backward`` that moves
      2× the forward bytes. NB: a rule of thumb (read the saved input and the output grad,
      write the input grad).
    - per GEMM with a fused bias that needs grad (Linear, addmm, HF Conv1D), the bias gradient:
      a ``reduction`` OtherOp (``aten.sum``, phase ``backward``) that reads dC and writes the
      bias's gradient. Optimizer steps are not here (see ``optimizer_ops``).
    - per tensor that feeds k > 1 ops needing grad, k − 1 gradient sums (``aten.add``, node
      ``<name>.grad_sum``), each reading two gradients and writing one. This is where a residual
      stream pays for its branch; the ``add`` that joins the branch back passes dy through.
    """
    check_choice("mode", mode, ("inference", "train"))
    walk = _Walk(captured, resolve_dtype(dtype), native_dtype, train=mode == "train")
    for node in captured.graph_module.graph.nodes:
        walk.visit(node)
    return walk.records()


class _Walk:
    """One extraction: which nodes need grad, the forward records in execution order, and each
    node's backward records (autograd runs them in reverse)."""

    def __init__(self, captured: Any, cd: ComputeDtype, native: torch.dtype | None,
                 train: bool) -> None:
        self.cd, self.ctx, self.train = cd, _Ctx(cd, native), train
        self.model_name: str = captured.model_name
        self.causal_modules: frozenset[str] = getattr(captured, "causal_modules", frozenset())
        self.placeholder_grad: Mapping[str, bool] = captured.requires_grad
        self.requires: dict[Any, bool] = {}
        self.fwd_gemms: list[GemmSite] = []
        self.fwd_others: list[OtherOp] = []
        self.bwd: dict[Any, list[GemmSite | OtherOp]] = {}  # per node, in forward order

    def tensor(self, x: Any) -> Any:
        return x.meta.get("val") if hasattr(x, "meta") else x

    def requires_grad(self, x: Any) -> bool:
        return bool(self.requires.get(x, False)) if hasattr(x, "meta") else False

    def visit(self, node: Any) -> None:
        """Record one node: its forward records, and its backward ones in train mode."""
        if node.op == "placeholder":
            self.requires[node] = bool(self.placeholder_grad.get(node.name, False))
            self.bwd[node] = []
            return
        if node.op != "call_function":
            return
        name = op_name(node.target)
        out_tensors = _tensors(node.meta.get("val"))
        self.requires[node] = (
            not node.meta.get(NO_GRAD)
            and name.rstrip("_") not in _NO_GRAD
            and any(t.dtype.is_floating_point for t in out_tensors)
            and any(self.requires.get(i, False) for i in node.all_input_nodes)
        )
        self.bwd[node] = []
        if name == "getitem" or not out_tensors:
            return
        module, module_type = _module_of(node, self.model_name)
        handler = gemm_handler(name)
        ctx = HandlerContext(self.tensor, self.requires_grad, self.cd.in_bytes,
                             module in self.causal_modules)
        fwds = handler(bind_arguments(node), ctx) if handler is not None else []
        if fwds:
            copies = [self._copy(node, arg, val, module, module_type)
                      for arg, val in operand_copies(node)]
            self.fwd_others.extend(copies)
            records, back = self._gemms(node, fwds, out_tensors[0], module, module_type, ctx)
            records[:0] = copies
        else:
            records, back = self._other(node, name, out_tensors, module, module_type)
        node.meta[META_KEY] = tuple(records) + tuple(back)
        self.bwd[node] = back

    def _copy(self, node: Any, arg: Any, val: torch.Tensor, module: str, module_type: str
              ) -> OtherOp:
        """The copy kernel that lays GEMM ``node``'s operand ``arg`` out for its library call
        (``operand_copies``): reads and writes the operand once."""
        return OtherOp(module=module, module_type=module_type, op="aten.clone",
                       node=f"{node.name}.{OPERAND_COPY}.{arg.name}", phase="forward",
                       op_class="copy", dtype=self.ctx.act_name, numel=val.numel(),
                       dram_bytes=2 * self.ctx.tensor_bytes(val))

    def _gemms(self, node: Any, fwds: Sequence[ForwardGemm], out: torch.Tensor, module: str,
               module_type: str, handler_ctx: HandlerContext
               ) -> tuple[list[GemmSite | OtherOp], list[GemmSite | OtherOp]]:
        """A GEMM node's records: its GEMMs (SDPA's softmax between them) and their backward."""
        records: list[GemmSite | OtherOp] = []
        back: list[GemmSite | OtherOp] = []
        for f in fwds:
            site = _site(f, self.ctx, module, module_type, node.name)
            records.append(site)
            self.fwd_gemms.append(site)
            if f.op == "sdpa_qk":
                soft = _sdpa_softmax(node, f, self.ctx, module, module_type, handler_ctx)
                records.append(soft)
                self.fwd_others.append(soft)
                if self.train and self.requires[node]:
                    back[:0] = [_backward_other(soft)]
            if self.train and not node.meta.get(NO_GRAD):  # backward runs in reverse, in a node too
                back[:0] = _backward_sites(f, site)
                if f.bias_grad_elems:
                    back.append(_bias_grad(site, f.bias_grad_elems, out, self.ctx))
        return records, back

    def _other(self, node: Any, name: str, out_tensors: list[torch.Tensor], module: str,
               module_type: str) -> tuple[list[GemmSite | OtherOp], list[GemmSite | OtherOp]]:
        """A non-GEMM node's record and, where its output needs grad, its backward."""
        other = _other(node, name, node.all_input_nodes, out_tensors, self.ctx, module,
                       module_type)
        self.fwd_others.append(other)
        back: list[GemmSite | OtherOp] = []
        if self.train and self.requires[node] and other.op_class != "view":
            back.append(_backward_other(other))
        return [other], back

    def records(self) -> tuple[tuple[GemmSite, ...], tuple[OtherOp, ...]]:
        """Every GEMM and every other op: the forward pass, then (train) the backward pass."""
        if self.train:
            for node, back in self.bwd.items():
                sums = _gradient_sums(node, self.requires, self.ctx, self.model_name)
                if sums:  # autograd sums a tensor's gradients before the op that made it runs
                    back[:0] = sums
                    node.meta[META_KEY] = node.meta.get(META_KEY, ()) + tuple(sums)
        bwd_gemms: list[GemmSite] = []
        bwd_others: list[OtherOp] = []
        for back in reversed(self.bwd.values()):
            for r in back:
                if isinstance(r, GemmSite):
                    bwd_gemms.append(r)
                else:
                    bwd_others.append(r)
        return tuple(self.fwd_gemms + bwd_gemms), tuple(self.fwd_others + bwd_others)


def batch_flattens(shape: tuple[int, ...], stride: tuple[int, ...]) -> bool:
    """Whether a (…, m, k) operand's batch dims fold into one stride and its matrix has a unit
    stride, so a batched GEMM reads it in place."""
    if stride[-1] != 1 and stride[-2] != 1:
        return False
    dims = [(n, st) for n, st in zip(shape[:-2], stride[:-2]) if n != 1]
    return all(dims[i][1] == dims[i + 1][1] * dims[i + 1][0] for i in range(len(dims) - 1))


def operand_copies(node: Any) -> list[tuple[Any, torch.Tensor]]:
    """Operands of GEMM ``node`` that its library call cannot read in place, each with its value:
    3-D or more, with batch dims that do not fold into one stride (attention's permuted heads),
    so the op copies them first, eagerly (``reshape`` → ``clone``) as compiled."""
    if op_name(node.target) not in RESHAPING_GEMMS:
        return []
    out = []
    for arg in node.all_input_nodes:
        val = arg.meta.get("val")
        if (isinstance(val, torch.Tensor) and val.dim() >= 3
                and not batch_flattens(tuple(val.shape), tuple(val.stride()))):
            out.append((arg, val))
    return out


def _gemm_bytes(batch: int, m: int, n: int, k: int, cd: ComputeDtype) -> int:
    return batch * (m * k + k * n) * cd.in_bytes + batch * m * n * cd.out_bytes


def _site(f: ForwardGemm, ctx: _Ctx, module: str, module_type: str, node: str) -> GemmSite:
    cd = ctx.cd
    dense = 2 * f.batch * f.m * f.n * f.k
    if f.kept is None:
        flops = dense
    else:  # kept scores of the (q_len, kv_len) matrix: qk is (m=q, n=kv), pv is (m=q, k=kv)
        kv = f.n if f.op == "sdpa_qk" else f.k
        flops = dense // (f.m * kv) * f.kept
    if f.io_elems is not None:  # elements read, elements written
        dram = f.io_elems[0] * cd.in_bytes + f.io_elems[1] * cd.out_bytes
    elif f.tensor_elems is not None:  # A's and B's tensors read, C's written
        a, b, c = f.tensor_elems
        dram = (a + b) * cd.in_bytes + c * cd.out_bytes
    else:
        dram = _gemm_bytes(f.batch, f.m, f.n, f.k, cd)
    op = "conv1d" if module_type == "Conv1D" and f.op == "addmm" else f.op
    return GemmSite(
        module=module,
        module_type=module_type,
        op=op,
        node=node,
        phase="forward",
        batch=f.batch,
        m=f.m,
        n=f.n,
        k=f.k,
        dtype=cd.name,
        out_dtype=ctx.out_name,
        a_transposed=f.a[0],
        b_transposed=f.b[0],
        a_align_bytes=f.a[1],
        b_align_bytes=f.b[1],
        # the scores of a fused attention kernel stay on chip: no row of them is stored
        c_align_bytes=16 if f.op == "sdpa_qk" else alignment_bytes(f.n, cd.out_bytes),
        bias=f.bias,
        flops=flops,
        dram_bytes=dram,
        causal=f.kept is not None,
        taps=f.taps,
    )


def _backward_sites(f: ForwardGemm, fwd: GemmSite) -> list[GemmSite]:
    """dA = dC·Bᵀ and dB = Aᵀ·dC (for a Linear weight, dW = dYᵀ·X), as autograd runs them."""
    # dC is a contiguous (m, n) gradient; fused attention's backward keeps dS (QKᵀ's dC) and
    # dP (PV's dA) on chip, as the forward keeps S and P: their alignment costs nothing
    dc_align = 16 if fwd.op == "sdpa_qk" else alignment_bytes(fwd.n, DTYPES[fwd.dtype].in_bytes)
    out: list[GemmSite] = []
    if f.grad_a:  # dA (m, k) = dC (m, n) · Bᵀ (n, k)
        out.append(_backward_site(f, fwd, "backward_dx", fwd.m, fwd.k, fwd.n, (False, dc_align),
                                  (not fwd.b_transposed, fwd.b_align_bytes)))
    if f.grad_b and f.weight_b:  # dW (n, k) = dYᵀ (n, m) · X (m, k)
        out.append(_backward_site(f, fwd, "backward_dw", fwd.n, fwd.k, fwd.m, (True, dc_align),
                                  (fwd.a_transposed, fwd.a_align_bytes)))
    elif f.grad_b:  # dB (k, n) = Aᵀ (k, m) · dC (m, n)
        out.append(_backward_site(f, fwd, "backward_dw", fwd.k, fwd.n, fwd.m,
                                  (not fwd.a_transposed, fwd.a_align_bytes), (False, dc_align)))
    return out


def _backward_site(f: ForwardGemm, fwd: GemmSite, phase: str, m: int, n: int, k: int,
                   a: tuple[bool, int], b: tuple[bool, int]) -> GemmSite:
    """One gradient GEMM of ``fwd``: its dims, and A's and B's (transposed, alignment bytes)."""
    cd = DTYPES[fwd.dtype]
    dense = 2 * fwd.batch * m * n * k
    flops = dense * fwd.flops // fwd.dense_flops if fwd.causal else dense
    dram = _gemm_bytes(fwd.batch, m, n, k, cd)
    if f.tensor_elems is not None:  # dX reads dY and W, writes dX; dW reads X and dY
        x, w, y = f.tensor_elems
        read, written = (y + w, x) if phase == "backward_dx" else (x + y, w)
        dram = read * cd.in_bytes + written * cd.out_bytes
    if fwd.op == "sdpa_pv" and phase == "backward_dx":  # dP, on chip
        c_align = 16
    elif fwd.op == "sdpa_qk" and phase == "backward_dw":  # dKᵀ, stored as dK's (kv, d) rows
        c_align = alignment_bytes(fwd.k, cd.out_bytes)
    else:
        c_align = alignment_bytes(n, cd.out_bytes)
    return replace(fwd, phase=phase, m=m, n=n, k=k, a_transposed=a[0], b_transposed=b[0],
                   a_align_bytes=a[1], b_align_bytes=b[1], c_align_bytes=c_align, bias=False,
                   flops=flops, dram_bytes=dram)


def _gradient_sums(
    node: Any, requires: Mapping[Any, bool], ctx: _Ctx, model_name: str
) -> list[OtherOp]:
    """The adds autograd runs for a tensor that feeds several differentiable ops (a residual
    stream's fork, Q/K/V projections of one hidden state, a weight tied to two layers): one
    per extra use, reading two gradients and writing their sum."""
    t = node.meta.get("val")
    if not requires.get(node) or not isinstance(t, torch.Tensor):
        return []
    uses = sum(1 for user in node.users if requires.get(user))
    if uses < 2:
        return []
    module, module_type = _module_of(node, model_name)
    size = ctx.tensor_bytes(t)
    return [
        OtherOp(
            module=module,
            module_type=module_type,
            op="aten.add",
            node=f"{node.name}.grad_sum",
            phase="backward",
            op_class="elementwise",
            dtype=ctx.act_name,
            numel=t.numel(),
            dram_bytes=3 * size,
        )
        for _ in range(uses - 1)
    ]


def _bias_grad(site: GemmSite, elems: int, out: torch.Tensor, ctx: _Ctx) -> OtherOp:
    """dbias = dC summed over its broadcast dims: reads dC once, writes the bias's gradient."""
    elem = ctx.elem_bytes(out.dtype)
    return OtherOp(
        module=site.module,
        module_type=site.module_type,
        op="aten.sum",
        node=site.node,
        phase="backward",
        op_class="reduction",
        dtype=ctx.act_name,
        numel=elems,
        dram_bytes=(unique_numel(out) + elems) * elem,
    )


def _sdpa_softmax(node: Any, f: ForwardGemm, ctx: _Ctx, module: str, module_type: str,
                  handler_ctx: HandlerContext) -> OtherOp:
    """The on-chip softmax of a fused attention call, carrying the call's ``AttentionShape``
    (a GPU runs the whole call as one attention kernel: ``predict.price``)."""
    b = bind_arguments(node)
    mask = b.get("attn_mask", b.get("attn_bias"))
    mask_val = getattr(mask, "meta", {}).get("val")
    mask_bytes = ctx.tensor_bytes(mask_val) if isinstance(mask_val, torch.Tensor) else 0
    scores = f.batch * (f.kept if f.kept is not None else f.m * f.n)
    return OtherOp(
        module=module,
        module_type=module_type,
        op="aten.scaled_dot_product_attention",
        node=node.name,
        phase="forward",
        op_class="softmax",
        dtype=ctx.act_name,
        numel=scores,
        dram_bytes=mask_bytes,
        flops=5 * scores,  # NB: scale, max, subtract, exp, sum per score
        attention=attention_shape(b, handler_ctx, mask_bytes),
    )


def _backward_other(op: OtherOp) -> OtherOp:
    return OtherOp(
        module=op.module,
        module_type=op.module_type,
        op=op.op,
        node=op.node,
        phase="backward",
        op_class=op.op_class,
        dtype=op.dtype,
        numel=op.numel,
        dram_bytes=2 * op.dram_bytes,
        flops=2 * op.flops,
    )


def _other(
    node: Any,
    name: str,
    inputs: Sequence[Any],
    outs: list[torch.Tensor],
    ctx: _Ctx,
    module: str,
    module_type: str,
) -> OtherOp:
    base = name.rstrip("_") if name not in ("__and__", "__or__", "__xor__") else name
    in_vals = [t for i in inputs for t in _tensors(i.meta.get("val"))]
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
    out_bytes = sum(ctx.tensor_bytes(t) for t in outs)
    if op_class == "view":
        dram = 0
    elif op_class == "embedding":  # gathers rows: indices in, rows read, rows written
        idx = sum(ctx.tensor_bytes(t) for t in in_vals if not t.dtype.is_floating_point)
        dram = idx + 2 * out_bytes
    else:
        seen: set[int] = set()
        dram = out_bytes
        for t in in_vals:
            if id(t) not in seen:
                seen.add(id(t))
                dram += ctx.tensor_bytes(t)
    floating = any(t.dtype.is_floating_point for t in outs + in_vals)
    return OtherOp(
        module=module,
        module_type=module_type,
        op=_qualified(node.target),
        node=node.name,
        phase="forward",
        op_class=op_class,
        dtype=ctx.act_name if floating else str(outs[0].dtype).removeprefix("torch."),
        numel=max(t.numel() for t in outs),
        dram_bytes=int(dram),
    )


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


# --- the optimizer's step, as ops of phase ``optimizer``

# the optimizer's update: torch.optim.AdamW's default foreach path, per parameter element
# (reads + writes of param, grad, exp_avg, exp_avg_sq and the sqrt temporary, in 8 kernels)
_ADAMW_PASSES: tuple[tuple[str, int], ...] = (
    ("aten._foreach_mul_", 2),  # p *= 1 - lr·wd
    ("aten._foreach_lerp_", 3),  # m = lerp(m, g, 1 - β1)
    ("aten._foreach_mul_", 2),  # v *= β2
    ("aten._foreach_addcmul_", 3),  # v += (1 - β2)·g·g
    ("aten._foreach_sqrt", 2),  # s = sqrt(v)
    ("aten._foreach_div_", 2),  # s /= sqrt(bias correction)
    ("aten._foreach_add_", 2),  # s += eps
    ("aten._foreach_addcdiv_", 4),  # p -= step·m / s
)
_FOREACH_TENSORS_PER_LAUNCH = 110  # NB: multi_tensor_apply's depth-4 chunking, roughly


def adamw_ops(n_params: int, n_tensors: int, dtype: str = "float32") -> tuple[OtherOp, ...]:
    """The update of ``torch.optim.AdamW`` (foreach path) over ``n_params`` elements held in
    ``n_tensors`` tensors, as ops of phase ``optimizer``; one record per kernel group."""
    if n_params < 0 or n_tensors < 0:
        raise ValueError(f"n_params and n_tensors must be >= 0, got {n_params}, {n_tensors}")
    elem = DTYPES[dtype].in_bytes if dtype in DTYPES else 4
    launches = max(1, -(-n_tensors // _FOREACH_TENSORS_PER_LAUNCH))
    out = []
    for name, passes in _ADAMW_PASSES:
        for i in range(launches):
            share = n_params // launches + (1 if i < n_params % launches else 0)
            out.append(
                OtherOp(
                    module="",
                    module_type="AdamW",
                    op=name,
                    node="optimizer.step",
                    phase="optimizer",
                    op_class="elementwise",
                    dtype=dtype,
                    numel=share,
                    dram_bytes=passes * share * elem,
                )
            )
    return tuple(out)


OPTIMIZERS: tuple[str, ...] = ("adamw", "adam")


def optimizer_ops(
    optimizer: Any, params: Iterable[torch.Tensor] | None = None
) -> tuple[OtherOp, ...]:
    """The update step of ``optimizer`` over ``params`` (those with ``requires_grad``).

    ``optimizer`` is a name in ``OPTIMIZERS`` (then ``params`` is required) or a
    ``torch.optim.AdamW`` / ``Adam`` instance (its own parameters). NB: Adam without weight
    decay skips the first kernel; it is priced as AdamW.
    """
    if isinstance(optimizer, (torch.optim.AdamW, torch.optim.Adam)):
        params = [p for g in optimizer.param_groups for p in g["params"]]
    elif isinstance(optimizer, str) and optimizer.lower() in OPTIMIZERS:
        if params is None:
            raise ValueError(
                f"optimizer={optimizer!r} needs the model's parameters to size its update"
            )
    else:
        raise ValueError(f"{unknown('optimizer', optimizer, OPTIMIZERS)} Or pass a "
                         "torch.optim.AdamW / Adam instance.")
    trained = [p for p in params if p.requires_grad]
    dtype = str(trained[0].dtype).removeprefix("torch.") if trained else "float32"
    return adamw_ops(sum(p.numel() for p in trained), len(trained), dtype)
