"""The user's model is left exactly as it was, after a capture that works and one that fails."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.modules.module as module_globals
from torch import nn

import torch_gemm_cost as tgc
from torch_gemm_cost.capture.core import CaptureError

_HOOK_DICTS = (
    "_forward_hooks",
    "_forward_pre_hooks",
    "_backward_hooks",
    "_backward_pre_hooks",
    "_state_dict_hooks",
    "_load_state_dict_pre_hooks",
    "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called",
    "_forward_pre_hooks_with_kwargs",
)
_GLOBAL_HOOKS = (
    "_global_forward_hooks",
    "_global_forward_pre_hooks",
    "_global_backward_hooks",
    "_global_backward_pre_hooks",
    "_global_forward_hooks_always_called",
    "_global_module_registration_hooks",
    "_global_parameter_registration_hooks",
)


def snapshot(model: nn.Module) -> dict[str, Any]:
    """Everything estimate() could disturb: flags, tensors (by identity and content), hooks."""
    state: dict[str, Any] = {}
    for name, m in model.named_modules():
        state[f"{name}:training"] = m.training
        state[f"{name}:dict"] = sorted(m.__dict__)
        for h in _HOOK_DICTS:
            state[f"{name}:{h}"] = len(getattr(m, h, {}) or {})
    for kind, tensors in (("p", model.named_parameters()), ("b", model.named_buffers())):
        for name, t in tensors:
            state[f"{kind}:{name}"] = (
                id(t),
                type(t),
                t.requires_grad,
                t.device,
                t.dtype,
                tuple(t.shape),
                t._version,
            )
            if not t.is_meta:
                state[f"{kind}:{name}:value"] = t.detach().clone()
    for g in _GLOBAL_HOOKS:
        state[f"global:{g}"] = len(getattr(module_globals, g, {}) or {})
    return state


def assert_same(before: dict[str, Any], after: dict[str, Any]) -> None:
    assert before.keys() == after.keys()
    for key, value in before.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(value, after[key]), key
        else:
            assert value == after[key], key


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.drop = nn.Dropout(0.1)
        self.norm = nn.BatchNorm1d(8)  # has running-stat buffers a real run would update

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.drop(self.fc(x)))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = Block()
        self.b = Block()
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.b(self.a(x)))


class FailsInside(Net):
    """Fails inside a submodule, after some GEMMs and a BatchNorm ran, in every capture path."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.a(x)
        return self.head(self.b(h[:, :5]))  # b.fc wants 8 features


def mixed_state(model: nn.Module) -> nn.Module:
    model.train()
    model.a.eval()  # mixed training flags must come back as they were
    model.head.weight.requires_grad_(False)
    return model


@pytest.mark.parametrize("method", ["dispatch", "export", "eager"])
@pytest.mark.parametrize("mode", ["inference", "train"])
def test_real_model_untouched(method: str, mode: str) -> None:
    torch.manual_seed(0)
    model = mixed_state(Net())
    x = torch.randn(4, 8)
    before = snapshot(model)
    report = tgc.estimate(model, (x,), device="a100_sxm4_80gb", mode=mode, capture_method=method)
    assert len([g for g in report.gemms if g.site.phase == "forward"]) == 3
    assert_same(before, snapshot(model))


def test_meta_model_stays_meta() -> None:
    with torch.device("meta"):
        model = mixed_state(Net())
    before = snapshot(model)
    tgc.estimate(model, (torch.randn(4, 8),), device="h100_sxm5_80gb", dtype="bf16", mode="train")
    after = snapshot(model)
    assert_same(before, after)
    assert all(p.is_meta for p in model.parameters())


@pytest.mark.parametrize("method", ["auto", "dispatch", "export", "eager"])
def test_untouched_when_capture_fails(method: str) -> None:
    torch.manual_seed(0)
    model = mixed_state(FailsInside())
    before = snapshot(model)
    with pytest.raises(CaptureError) as info:
        tgc.estimate(model, (torch.randn(4, 8),), device="t4", capture_method=method)
    assert_same(before, snapshot(model))
    assert info.value.__cause__ is not None


def test_compiled_model_is_unwrapped_and_untouched() -> None:
    model = Net()
    compiled = torch.compile(model)
    before = snapshot(model)
    report = tgc.estimate(compiled, (torch.randn(4, 8),), device="t4")
    assert report.model == "Net"
    assert [g.site.module for g in report.gemms] == ["a.fc", "b.fc", "head"]
    assert_same(before, snapshot(model))
