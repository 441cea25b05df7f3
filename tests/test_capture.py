"""Capture: both paths give graphs with shapes and module paths; fallback and errors."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from torch_gemm_cost.capture.core import CaptureError, capture, unwrap_model


class Inner(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.proj(x))


class Outer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = Inner()
        self.scale = nn.Parameter(torch.ones(4), requires_grad=False)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"y": self.inner(x) * self.scale}


def call_nodes(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.op == "call_function"]


@pytest.mark.parametrize("method", ["dispatch", "export"])
def test_graph_has_shapes_and_module_paths(method: str) -> None:
    captured = capture(Outer(), (torch.ones(3, 8),), method=method)
    assert captured.method == method and captured.model_name == "Outer"
    linear = next(n for n in call_nodes(captured.graph_module) if "linear" in str(n.target))
    assert tuple(linear.meta["val"].shape) == (3, 4)
    path, typ = list(linear.meta["nn_module_stack"].values())[-1]
    assert path == "inner.proj" and str(typ).endswith("Linear")
    relu = next(n for n in call_nodes(captured.graph_module) if "relu" in str(n.target))
    assert list(relu.meta["nn_module_stack"].values())[-1][0] == "inner"
    # gradients: the trainable weight and bias, not the frozen scale or the input
    grads = {name for name, g in captured.requires_grad.items() if g}
    assert len(grads) == 2 and all("proj" in g for g in grads)


def test_meta_model_takes_cpu_inputs() -> None:
    with torch.device("meta"):
        model = Outer()
    captured = capture(model, (torch.ones(3, 8),))  # the input is moved to meta, not the model
    assert all(p.is_meta for p in model.parameters())
    assert any("linear" in str(n.target) for n in call_nodes(captured.graph_module))


class ExportOnly(nn.Module):
    """Reads a value unless exporting: only torch.export takes it."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not torch.compiler.is_exporting() and bool((x > 0).all()):
            x = x * 2
        return self.fc(x)


def test_auto_falls_back_to_export() -> None:
    captured = capture(ExportOnly(), (torch.ones(2, 4),))
    assert captured.method == "export"


class ValueDependent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = Inner()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.block.proj(x)
        return h * 2 if h.sum().item() > 0 else h


def test_meta_model_that_reads_values_runs_on_real_cpu_tensors() -> None:
    with torch.device("meta"):
        model, x = ValueDependent(), torch.ones(2, 8)
    captured = capture(model, (x,))  # .item() on meta: both fake-tensor paths fail
    assert captured.method == "eager"
    linear = next(n for n in call_nodes(captured.graph_module) if "linear" in str(n.target))
    assert list(linear.meta["nn_module_stack"].values())[-1][0] == "block.proj"
    assert tuple(linear.meta["val"].shape) == (2, 4) and not linear.meta["val"].is_meta
    assert all(p.is_meta for p in model.parameters())  # the user's model is left meta


class StateAttribute(nn.Module):
    """KernelBench's RNNs keep their initial state as a plain tensor attribute, moved in forward;
    a count read off the input picks how many rows run."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 4)
        self.h0 = torch.randn(3, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.h0 = self.h0.to(x.device)
        rows = int((x[:, 0] > -1e9).sum().item())  # every row: 3 with any values
        return self.proj(x[:rows]) + self.h0


def test_meta_tensor_attributes_are_made_real_too() -> None:
    with torch.device("meta"):
        model, x = StateAttribute(), torch.ones(3, 8)
    captured = capture(model, (x,))
    assert captured.method == "eager"
    add = next(n for n in call_nodes(captured.graph_module) if str(n.target) == "aten.add.Tensor")
    assert tuple(add.meta["val"].shape) == (3, 4)
    assert model.h0.is_meta  # the user's model keeps its own


def test_error_names_stage_node_and_what_to_try() -> None:
    with torch.device("meta"):
        model = ValueDependent()
    # Linear(8, 4) made real: (32 + 4) fp32 = 144 B; its (2, 4) output then takes 32 B more
    with pytest.raises(CaptureError) as info:
        capture(model, (torch.ones(2, 8),), real_bytes_limit=150)
    text = str(info.value)
    # the recorder names the ATen op and the module; both name the line of the model's code
    assert "'dispatch' failed at node aten._local_scalar_dense.default in module '(top)'" in text
    assert "(forward at " in text and "'export' failed in forward at " in text
    assert ("'eager' failed at node aten.linear.default in module 'block.proj'" in text
            and "to 176 B, past real_bytes_limit = 150 B" in text)
    assert "Try: a larger real_bytes_limit" in text and "ValueDependent" in text
    assert isinstance(info.value.__cause__, Exception)
    # over the limit before anything runs: nothing is allocated
    with pytest.raises(CaptureError, match=r"'eager' failed before running: RealBytesLimitError: "
                       r"the model's 2 parameters and buffers and its inputs would take the "
                       r"real-tensor capture to 144 B, past real_bytes_limit = 100 B"):
        capture(model, (torch.ones(2, 8),), real_bytes_limit=100)
    with pytest.raises(CaptureError, match="capture_method='export'"):
        capture(model, (torch.ones(2, 8),), method="dispatch")
    with pytest.raises(ValueError, match="real_bytes_limit must be a positive number of bytes, "
                       "got 0; the default is 4294967296"):
        capture(model, (torch.ones(2, 8),), real_bytes_limit=0)


def test_value_dependent_real_model_is_captured_eagerly() -> None:
    model = ValueDependent()
    captured = capture(model, (torch.ones(2, 8),))
    assert captured.method == "eager"
    linear = next(n for n in call_nodes(captured.graph_module) if "linear" in str(n.target))
    assert list(linear.meta["nn_module_stack"].values())[-1][0] == "block.proj"


def test_bad_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="'exprt'"):
        capture(Outer(), (torch.ones(3, 8),), method="exprt")
    with pytest.raises(TypeError, match="function"):
        capture(lambda x: x, (torch.ones(1),))  # type: ignore[arg-type]


def test_unwrap_compiled() -> None:
    model = Outer()
    assert unwrap_model(torch.compile(model)) is model
    assert unwrap_model(model) is model


def test_tied_weights_and_single_tensor_args() -> None:
    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(10, 8)
            self.head = nn.Linear(8, 10, bias=False)
            self.head.weight = self.emb.weight

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.head(self.emb(ids))

    captured = capture(Tied(), torch.zeros(2, 3, dtype=torch.long))  # a bare tensor is one arg
    heads = [n for n in call_nodes(captured.graph_module) if "linear" in str(n.target)]
    weight = heads[0].args[1]
    emb = next(n for n in call_nodes(captured.graph_module) if "embedding" in str(n.target))
    assert emb.args[0] is weight  # one placeholder for the shared weight


class Regions(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.frozen = nn.Linear(4, 4)
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            y = self.frozen(x)
        with torch.autocast("cpu", enabled=False):
            z = x @ x.t()
        return self.fc(y) + z.sum()


@pytest.mark.parametrize("method", ["dispatch", "export"])
def test_no_grad_and_autocast_regions(method: str) -> None:
    from torch_gemm_cost.records import extract

    captured = capture(Regions(), (torch.ones(4, 4),), train=True, method=method)
    sites, _ = extract(captured, "float32", mode="train")
    # export wraps both regions in submodules; their GEMMs are inlined, and the no_grad one
    # gets no backward although its weight requires grad
    assert [(s.module, s.op, s.phase) for s in sites] == [
        ("frozen", "linear", "forward"),
        ("", "matmul", "forward"),
        ("fc", "linear", "forward"),
        ("fc", "linear", "backward_dw"),
    ]


@pytest.mark.parametrize("method", ["dispatch", "export"])
def test_compiled_submodule_runs_eagerly_under_its_own_name(method: str) -> None:
    from torch_gemm_cost.records import extract

    model = Outer()
    model.inner.proj = torch.compile(model.inner.proj)  # type: ignore[assignment]
    sites, _ = extract(capture(model, (torch.ones(3, 8),), method=method), "float32")
    assert [(s.module, s.module_type) for s in sites] == [("inner.proj", "Linear")]


def test_mixture_of_experts_routing_is_captured_eagerly() -> None:
    transformers = pytest.importorskip("transformers")
    from torch_gemm_cost.records import extract

    cfg = transformers.SwitchTransformersConfig(
        d_model=32,
        d_kv=8,
        d_ff=64,
        num_layers=2,
        num_decoder_layers=2,
        num_heads=4,
        num_experts=4,
        vocab_size=100,
        encoder_sparse_step=1,
        decoder_sparse_step=1,
    )
    torch.manual_seed(0)
    model = transformers.SwitchTransformersForConditionalGeneration(cfg).eval()
    ids = torch.randint(0, 100, (2, 8))
    # routing picks rows by value: only a real run knows each expert's token count
    captured = capture(model, (ids,), {"decoder_input_ids": ids})
    assert captured.method == "eager"
    sites, _ = extract(captured, "float32")
    experts = [
        s
        for s in sites
        if s.module.startswith("encoder.block.0.layer.1.mlp.experts.") and s.module.endswith(".wi")
    ]
    assert sum(s.m for s in experts) == 2 * 8  # every token goes to exactly one expert
