"""``mode="forward"``: one forward without autograd, each module's training flag as the model
has it (a model built and called without ``.eval()``, as KernelBench times its programs).
Oracles: the forward of an eval-mode model is the inference estimate, and the forward of a
training-mode model is a training step's forward records, priced the same."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import torch_gemm_cost as tgc
from torch_gemm_cost.predict.call import ISSUE_KINDS

DEVICE = "a100_sxm4_80gb"


def cnn() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                         nn.Dropout(0.2), nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16))


X = (torch.ones(8, 3, 32, 32),)


def forward_records(report: tgc.CostReport, views: bool = True
                    ) -> list[tuple[object, float | None]]:
    return ([(g.site, g.time_ms) for g in report.gemms if g.site.phase == "forward"]
            + [(o.op, o.time_ms) for o in report.others if o.op.phase == "forward"
               and (views or o.op.op_class != "view")])


def test_forward_of_an_eval_model_is_its_inference_estimate() -> None:
    model = cnn().eval()
    forward = tgc.estimate(model, X, device=DEVICE, mode="forward")
    with torch.no_grad():  # inference captures under autograd's flag; forward runs without
        inference = tgc.estimate(model, X, device=DEVICE, mode="inference")
    assert forward_records(forward) == forward_records(inference)
    assert (forward.total_ms, forward.gpu_ms) == (inference.total_ms, inference.gpu_ms)
    assert forward.mode == "forward" and not model.training


def test_forward_of_a_training_model_is_a_train_steps_forward() -> None:
    model = cnn()  # nn.Module's default: training
    # 32 images of 128²: each 16-channel activation is 33.5 MB, so neither call's working set
    # fits the A100's 40 MB of L2 (a train step's, with its gradients, is larger than a
    # forward's: where both fit, the step's ops would find less of theirs there)
    x = (torch.ones(32, 3, 128, 128),)
    forward = tgc.estimate(model, x, device=DEVICE, mode="forward")
    step = tgc.estimate(model, x, device=DEVICE, mode="train")
    # the same records, priced the same (but the detach views autograd adds); no backward
    assert forward_records(forward, views=False) == forward_records(step, views=False)
    assert {o.op.phase for o in forward.others} | {g.site.phase for g in forward.gemms} == {
        "forward"}
    assert all(m.training for m in model.modules())  # the flags are left as they were
    # a forward's memory: no gradients, no optimizer states
    assert (forward.memory.mode, forward.memory.optimizer) == ("forward", "none")
    assert forward.memory.grads_bytes == 0 < step.memory.grads_bytes
    # the batch norms compute their statistics; inference reads the running ones
    inference = tgc.estimate(model, x, device=DEVICE, mode="inference")
    stats = [o.op.computes_stats for o in forward.others if o.op.op_class == "norm"]
    assert stats == [True, True]
    assert [o.op.computes_stats for o in inference.others if o.op.op_class == "norm"] == [
        False, False]
    # what differs from inference is the batch norms' and the dropout's work, nothing else
    differ = {o.op.module_type for o in forward.others if o.time_ms} ^ {
        o.op.module_type for o in inference.others if o.time_ms}
    assert differ == {"Dropout"}
    assert forward.gpu_ms > inference.gpu_ms


def test_forward_follows_each_modules_own_flag() -> None:
    model = cnn()
    model[1].eval()  # the first batch norm on its running statistics, the second not
    model[3].eval()  # and the dropout off
    report = tgc.estimate(model, X, device=DEVICE, mode="forward")
    assert [o.op.computes_stats for o in report.others if o.op.op_class == "norm"] == [
        False, True]
    assert not [o for o in report.others if o.op.module_type == "Dropout" and o.time_ms]
    assert [m.training for m in model] == [True, False, True, False, True, True]


def test_forward_takes_no_optimizer_and_annotates() -> None:
    with pytest.raises(ValueError, match="needs mode='train', got mode='forward'"):
        tgc.estimate(cnn(), X, device=DEVICE, mode="forward", optimizer="adamw")
    with pytest.raises(ValueError, match="unknown mode 'fwd'"):
        tgc.estimate(cnn(), X, device=DEVICE, mode="fwd")
    graph = tgc.annotate(cnn(), X, device=DEVICE, mode="forward")
    records = [r for n in graph.graph.nodes for r in n.meta.get("torch_gemm_cost", ())]
    assert any(getattr(r, "computes_stats", False) for r in records)
    assert {r.phase for r in records} == {"forward"}


def test_a_dropout_is_one_call() -> None:
    # CUDA's F.dropout in training mode is one native_dropout call; captured off-GPU it is
    # bernoulli_, div_ and mul (and an empty_like view): the host issues one op for the three
    model = nn.Sequential(nn.Linear(64, 64), nn.Dropout(0.1))
    report = tgc.estimate(model, (torch.ones(8, 64),), device=DEVICE, mode="forward")
    assert [o.op.op for o in report.others if o.op.op_class != "view"] == [
        "aten.bernoulli_", "aten.div_", "aten.mul"]
    kinds = report.call.issues.kind.tolist()
    # the linear's addmm and the dropout; the empty_like a view
    assert (kinds.count(ISSUE_KINDS.index("op")), kinds.count(ISSUE_KINDS.index("view"))) == (
        2, 1)
