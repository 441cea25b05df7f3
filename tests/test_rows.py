"""Row-wise ops and statistics norms by their passes over memory (predict/rows.py): hand-worked
times on a V100 (900 GB/s, 80 SMs) with round constants, and what capture records for them."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import torch_gemm_cost as tgc
from torch_gemm_cost import get_device
from torch_gemm_cost.capture.core import capture
from torch_gemm_cost.predict.ops import OP_CLASSES, OpBatch, OpCostModel
from torch_gemm_cost.records import OtherOp, extract

V100 = get_device("tesla_v100_pcie_32gb")
TABLE = OpCostModel.from_dict(
    {
        "classes": {c: {"eta": 0.9, "floor_ms": 0.03} for c in OP_CLASSES
                    if c not in ("view", "other")} | {"norm": {"eta": 0.5, "floor_ms": 0.045}},
        "launch_ms": 0.005,
    }
)


def row_op(name: str, cls: str, numel: int, dram_bytes: int, row_elems: int = 0,
           computes_stats: bool = False) -> OtherOp:
    return OtherOp("m", "M", name, "n0", "forward", cls, "float32", numel, dram_bytes,
                   row_elems=row_elems, computes_stats=computes_stats)


def times(*ops: OtherOp) -> list[float | None]:
    return TABLE.predict(OpBatch(ops), V100).times_or_none()


def test_softmax_rows_past_shared_memory_are_read_three_times():
    # 4096 rows of 12,288 fp32 (48 KiB: fits a block's shared memory): read once, written once,
    # 2·4096·12,288·4 = 402,653,184 B / (0.9·900e9) = 0.497103 ms + 5 µs launch
    fits = row_op("aten._softmax", "softmax", 4096 * 12_288, 402_653_184, 12_288)
    # 1024 rows of 49,152 (192 KiB): the same bytes, but max, sum and output each read the row:
    # 4 passes, 805,306,368 B / 810e9 = 0.994205 ms + 5 µs
    long = row_op("aten._softmax", "softmax", 1024 * 49_152, 402_653_184, 49_152)
    assert times(fits, long) == pytest.approx([0.502103, 0.999205], rel=1e-5)


def test_layer_norm_of_few_long_rows_streams_at_its_blocks_rate():
    # LayerNorm over (64, 256, 256) on 16 images: 16 rows of 4,194,304 fp32 (16 MiB each),
    # record 570,425,472 B; re-read from DRAM: 1.5x = 855,638,208 B. 16 blocks on 16 of the
    # 80 SMs, 4096 B in flight each over 500 ns: 16·4096/500e-9 = 131.072e9 B/s, under the
    # norm class's 0.5·900e9 = 450e9: 855,638,208 / 131.072e9 = 6.528 ms + 5 µs
    ln = row_op("aten.native_layer_norm", "norm", 16 * 4_194_304, 570_425_472, 4_194_304)
    assert times(ln) == pytest.approx([6.533], rel=1e-4)
    # 128 rows of 1024 (4 KiB, re-read from the block's cache), rows >= SMs: the DRAM bound
    # 2·128·1024·4 = 1,048,576 B / 450e9 = 2.330 µs + 5 µs
    short = row_op("aten.native_layer_norm", "norm", 128 * 1024, 1_048_576, 1024)
    assert times(short) == pytest.approx([0.007330], rel=1e-3)


def test_norms_that_compute_statistics_read_their_input_twice():
    # GroupNorm on 1,000,000 fp32: record 8,000,000 B (x read, y written); a moments kernel
    # reads x, a second reads x and writes y: 12,000,000 B at the elementwise 0.9·900e9 =
    # 14.815 µs + two launches (10 µs) = 0.024815 ms
    gn = row_op("aten.native_group_norm", "norm", 1_000_000, 8_000_000, computes_stats=True)
    # the same in eval-mode batch norm (running statistics): one pass, at the norm class's
    # 0.5·900e9: 8,000,000 / 450e9 = 17.778 µs + 5 µs
    bn_eval = row_op("aten.native_batch_norm", "norm", 1_000_000, 8_000_000)
    assert times(gn, bn_eval) == pytest.approx([0.024815, 0.022778], rel=1e-4)


def test_capture_records_rows_and_statistics():
    model = nn.Sequential(nn.BatchNorm2d(4), nn.GroupNorm(2, 4), nn.InstanceNorm2d(4),
                          nn.LayerNorm([4, 5, 5]), nn.Softmax(1))
    x = torch.ones(2, 4, 5, 5)
    for train, bn_stats in ((True, True), (False, False)):
        _, others = extract(capture(model, (x,), train=train), "float32",
                            mode="train" if train else "inference")
        got = [(o.op, o.row_elems, o.computes_stats) for o in others
               if o.phase == "forward" and o.op_class in ("norm", "softmax")]
        assert got == [
            # training mode: batch statistics, a block per channel over its 2·5·5 elements
            ("aten.native_batch_norm", 50 if train else 0, bn_stats),
            ("aten.native_group_norm", 2 * 5 * 5, True),  # a block per (image, group)
            # instance norm: per-image statistics, as a batch norm of (1, 2·4, 5, 5)
            ("aten.native_batch_norm", 5 * 5, True),
            ("aten.native_layer_norm", 4 * 5 * 5, False),  # normalized over (4, 5, 5)
            ("aten._softmax", 4, False),  # over dim 1, of 4 channels
        ]


def test_a_batch_norm_of_rows_and_channels_has_no_block_per_channel():
    # BatchNorm1d on (N, C): PyTorch's channels-last statistics kernel tiles N and C, so no
    # block per channel bounds it; on (N, C, L) it runs one block per channel of N·L elements
    for x, row in ((torch.ones(4096, 64), 0), (torch.ones(8, 64, 100), 8 * 100)):
        _, others = extract(capture(nn.BatchNorm1d(64), (x,), train=True), "float32")
        (norm,) = [o for o in others if o.op_class == "norm"]
        assert (norm.computes_stats, norm.row_elems) == (True, row)


def test_a_reduced_pointwise_loss_writes_and_rereads_its_loss_tensor():
    # smooth_l1_loss of two 1,000,000-element fp32 tensors to their mean: record 8,000,004 B
    # (both read, a scalar written); the loss tensor (4,000,000 B) is written, then read by the
    # mean: 16,000,008 B at the reduction class's 0.9·900e9 = 19.753 µs + two launches (10 µs)
    loss = row_op("aten.smooth_l1_loss", "reduction", 1, 8_000_004)
    # with reduction="none" the loss tensor is the output the record already counts
    each = row_op("aten.smooth_l1_loss", "reduction", 1_000_000, 12_000_000)
    assert times(loss, each) == pytest.approx([0.029753, 0.019815], rel=1e-4)


def test_a_training_flag_batch_norm_forward_reads_its_input_twice():
    # BatchNorm2d(64) left in training mode, (16, 64, 56, 56) fp32, one forward without
    # autograd (mode="forward"): x is 3,211,264 elements, 12,845,056 B.
    bn = nn.BatchNorm2d(64)
    x = torch.ones(16, 64, 56, 56)
    report = tgc.estimate(bn, (x,), device=V100, mode="forward", timing="kernel")
    assert bn.training  # the flag is the model's, and stays so
    (norm,) = [o.op for o in report.others if o.op.op_class == "norm"]
    # the record: x read, y written (2·12,845,056), weight, bias, running mean and variance
    # read and the batch's mean and inverse std written (6·64·4 = 1,536): 25,691,648 B
    assert (norm.computes_stats, norm.dram_bytes) == (True, 25_691_648)
    # priced as a statistics kernel reading x, then a normalizing one reading x and writing y:
    # 1.5·25,691,648 = 38,537,472 B at the elementwise 0.9·900e9 = 47.577 µs + 2 launches
    # (10 µs) = 0.057577 ms. The statistics kernel runs a block per channel, 64 on the V100's
    # 80 SMs: its pass (x, 12,845,056 B) streams at 64·4096 B / 500 ns = 524.288e9 B/s,
    # 24.500 µs where the DRAM's 810e9 would take 15.858: 8.642 µs more, 0.066219 ms
    assert norm.row_elems == 16 * 56 * 56
    assert times(norm) == pytest.approx([0.066219], rel=1e-4)
    # the same module in eval mode: one pass over the running statistics (no batch mean or
    # inverse std written: 25,691,136 B) at the norm class's 0.5·900e9 = 57.091 µs + 5 µs
    bn.eval()
    report = tgc.estimate(bn, (x,), device=V100, mode="forward", timing="kernel")
    (norm,) = [o.op for o in report.others if o.op.op_class == "norm"]
    assert (norm.computes_stats, norm.dram_bytes) == (False, 25_691_136)
    assert times(norm) == pytest.approx([0.062091], rel=1e-4)


@pytest.mark.parametrize("p, ms", [(0.1, 0.040681), (0.0, 0.0)])
def test_a_training_flag_dropout_forward_draws_its_mask(p, ms):
    # Dropout(p) in training mode on (16, 64, 56, 56) fp32: CUDA's fused native_dropout reads
    # x and writes y and a 1-byte mask, 3,211,264·(4 + 4 + 1) = 28,901,376 B in one kernel
    # (captured off-GPU as bernoulli_, div_ and mul: the bernoulli carries it, the others are
    # free): 28,901,376 / (0.9·900e9) = 35.681 µs + 5 µs. p = 0 returns its input: nothing.
    x = torch.ones(16, 64, 56, 56)
    report = tgc.estimate(nn.Dropout(p), (x,), device=V100, mode="forward", timing="kernel")
    ops = tuple(o.op for o in report.others)
    assert [o.op for o in ops if o.op_class != "view"] == (
        ["aten.bernoulli_", "aten.div_", "aten.mul"] if p else [])
    assert sum(t or 0.0 for t in times(*ops)) == pytest.approx(ms, rel=1e-4, abs=1e-9)
