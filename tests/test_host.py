"""The host's side of a call: the stream overlap by hand, the issue order of a run, the timings
``estimate`` offers, the fitted hosts' prior, and the host measured on this machine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import torch_gemm_cost as tgc
from torch_gemm_cost.calibrate.host import host_section, measure_host, with_host
from torch_gemm_cost.cli import main
from torch_gemm_cost.hardware.catalog import get_device
from torch_gemm_cost.predict.call import ISSUE_KINDS, KernelSequence, input_copy_ms
from torch_gemm_cost.predict.host import (
    HostCosts,
    HostCostTable,
    event_time_ms,
    graph_time_ms,
    host_prior,
    load_host_costs,
)
from torch_gemm_cost.train.host import HostRow, duplicate_boards, fit_group

# 10 µs call, 12 µs per op, 3 µs per view; compiled 40 µs call, 8 µs per kernel; 60 µs replay
COSTS = HostCosts(0.010, 0.012, 0.003, 0.040, 0.008, 0.060)


def _ms(values: list[float]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


def test_event_time_host_bound() -> None:
    # call 5 µs, 3 ops of 10 µs host and 2 µs GPU: issued at 15, 25, 35 µs; the GPU idles
    # between them, so the last kernel ends at 35 + 2 = 37 µs
    t = event_time_ms(_ms([0.010] * 3), _ms([0.002] * 3), 0.005)
    assert float(t) == pytest.approx(0.037)


def test_event_time_gpu_bound() -> None:
    # call 5 µs, 3 ops of 10 µs host and 50 µs GPU: the first starts at 15 µs and the GPU
    # never waits again: 15 + 150 = 165 µs
    t = event_time_ms(_ms([0.010] * 3), _ms([0.050] * 3), 0.005)
    assert float(t) == pytest.approx(0.165)


def test_event_time_mixed() -> None:
    # no call cost, 10 µs host each, GPU 30, 1, 1 µs: op 1 runs 10-40; op 2, issued at 20,
    # waits for it and runs 40-41; op 3, issued at 30, runs 41-42
    t = event_time_ms(_ms([0.010] * 3), _ms([0.030, 0.001, 0.001]), 0.0)
    assert float(t) == pytest.approx(0.042)
    # on a CPU the ops run as they are issued: 30 + 32 µs
    serial = event_time_ms(_ms([0.010] * 3), _ms([0.030, 0.001, 0.001]), 0.0, overlap=False)
    assert float(serial) == pytest.approx(0.062)


def test_event_time_batched_as_one_by_one() -> None:
    host, gpu = _ms([[0.010] * 3, [0.010] * 3]), _ms([[0.002] * 3, [0.050] * 3])
    t = event_time_ms(host, gpu, _ms([0.005, 0.005]))
    assert t.tolist() == pytest.approx([0.037, 0.165])
    # no issue at all: the call alone
    assert float(event_time_ms(_ms([]), _ms([]), 0.004)) == pytest.approx(0.004)


def test_graph_time() -> None:
    # floor 60 µs, copies 500 µs, kernels 10 + 20 µs
    assert float(graph_time_ms(_ms([0.010, 0.020]), 0.5, 0.060)) == pytest.approx(0.59)


def _mlp() -> tuple[torch.nn.Module, torch.Tensor]:
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64),
                                torch.nn.LayerNorm(64))
    return model, torch.randn(8, 64)


def test_issue_order_eager_and_compiled() -> None:
    model, x = _mlp()
    eager = tgc.estimate(model, (x,), device="l40s", host=COSTS, timing="kernel")
    assert eager.call is not None
    kinds = [ISSUE_KINDS[k] for k in eager.call.issues.kind.tolist()]
    # linear, relu, the detach of the captured graph (a view), linear, layer norm
    assert kinds == ["op", "op", "view", "op", "op"]
    gemm = [g.time_ms for g in eager.gemms]
    ops = [o.time_ms for o in eager.others]
    assert eager.call.issues.gpu_ms.tolist() == pytest.approx(
        [gemm[0], ops[0], 0.0, gemm[1], ops[2]])
    compiled = tgc.estimate(model, (x,), device="l40s", host=COSTS, timing="kernel",
                            compiled=True)
    assert compiled.call is not None
    # two extern GEMMs and two inductor kernels (relu, layer norm); the view costs nothing
    assert [ISSUE_KINDS[k] for k in compiled.call.issues.kind.tolist()] == ["kernel"] * 4


def test_estimate_timings_by_hand() -> None:
    model, x = _mlp()
    spec = get_device("l40s")
    by = {t: tgc.estimate(model, (x,), device="l40s", host=COSTS, timing=t)
          for t in ("event", "kernel", "graph")}
    gpu = by["kernel"].gpu_ms
    assert by["kernel"].total_ms == pytest.approx(gpu)
    assert by["kernel"].timing == "kernel" and by["event"].timing == "event"
    # event: 4 ops of 12 µs, a view of 3 µs, a 10 µs call: 61 µs of host; each kernel is
    # shorter than an issue, so the call is host-bound: 61 µs less the view's 3 (issued
    # before the last linear) ... the last issue (layer norm) at 61 µs, then its kernel
    g = by["event"].call.issues.gpu_ms.tolist()  # type: ignore[union-attr]
    assert max(g) < 0.012
    assert by["event"].host_ms == pytest.approx(0.061)
    assert by["event"].total_ms == pytest.approx(0.061 + g[-1])
    # graph: 60 µs floor, the input's 8·64·4 = 2048 bytes copied, the kernels
    copy = input_copy_ms(2048, spec)
    assert by["graph"].total_ms == pytest.approx(0.060 + copy + gpu)
    assert by["graph"].call.copy_ms == pytest.approx(copy)  # type: ignore[union-attr]
    d = by["event"].to_dict()
    assert (d["timing"], d["gpu_ms"], d["host_ms"]) == ("event", pytest.approx(gpu),
                                                        pytest.approx(0.061))
    # the rows still sum to the kernels' time, not to the event-timed total
    assert sum(r["time_ms"] for r in by["event"].module_rows()) == pytest.approx(gpu)
    assert "timed by events around the call" in by["event"].footer()


def test_the_default_timing_is_event() -> None:
    model, x = _mlp()
    rep = tgc.estimate(model, (x,), device="l40s")
    assert rep.timing == "event" and rep.total_ms > rep.gpu_ms
    assert rep.call is not None and "GA102" not in rep.call.host
    assert "AD102 held out" in rep.call.host  # an L40S is priced with other chips' hosts
    assert rep.call.lo_ms <= rep.total_ms <= rep.call.hi_ms


def test_bad_timing_names_the_nearest() -> None:
    model, x = _mlp()
    with pytest.raises(ValueError, match="unknown timing 'events'; did you mean 'event'"):
        tgc.estimate(model, (x,), device="l40s", timing="events")
    with pytest.raises(ValueError, match="CUDA graph replay"):
        tgc.estimate(model, (x,), device=get_device("l40s").__class__(
            **{**get_device("l40s").__dict__, "architecture": "cpu"}), timing="graph")


def _table() -> HostCostTable:
    hosts = {
        "a": {"chip": "X", "costs": HostCosts(0.01, 0.010, 0.002).to_dict()},
        "b": {"chip": "Y", "costs": HostCosts(0.02, 0.020, 0.004, graph_call_ms=0.05).to_dict()},
        "c": {"chip": "Z", "costs": HostCosts(0.03, 0.040, 0.006, graph_call_ms=0.07).to_dict()},
    }
    return HostCostTable.from_dict({"hosts": hosts})


def test_prior_holds_out_a_chip() -> None:
    table = _table()
    prior = table.prior(["Z"])  # hosts a and b: median of 0.010 and 0.020, range 0.010-0.020
    assert prior.mid.eager_op_ms == pytest.approx(0.015)
    assert (prior.lo.eager_op_ms, prior.hi.eager_op_ms) == (0.010, 0.020)
    assert prior.mid.graph_call_ms == pytest.approx(0.05)  # b alone has one
    assert "Z held out" in prior.source
    # a cost none of the kept hosts has: the median over every host
    assert table.prior(["Y", "Z"]).mid.graph_call_ms == pytest.approx(0.06)


def test_a_table_without_a_chip() -> None:
    table = _generations().without_chips(["Y"])  # a (v0) and c/v0.1 are left
    assert sorted(table.hosts) == ["a", "c/v0.1"]
    assert (table.generation("c/v0.1"), table.dates["a"]) == ("v0.1", "2025-01-21")
    # its prior is the whole table's without Y: the v0.1 host c alone, 0.004 ms an op
    assert table.prior().mid.eager_op_ms == _generations().prior(["Y"]).mid.eager_op_ms == 0.004


def _generations() -> HostCostTable:
    """Two v0 hosts that timed compiled programs, two v0.1 hosts that did not."""
    hosts = {
        "a": {"chip": "X", "generation": "v0", "date": "2025-01-21",
              "costs": HostCosts(0.01, 0.010, 0.002, 0.05, 0.030).to_dict()},
        "b": {"chip": "Y", "generation": "v0", "date": "2025-03-16",
              "costs": HostCosts(0.02, 0.020, 0.004, 0.05, 0.050, 0.05).to_dict()},
        "b/v0.1": {"chip": "Y", "generation": "v0.1", "date": "2026-01-14",
                   "costs": HostCosts(0.01, 0.008, 0.001).to_dict()},
        "c/v0.1": {"chip": "Z", "generation": "v0.1", "date": "2025-08-10",
                   "costs": HostCosts(0.01, 0.004, 0.001).to_dict()},
    }
    return HostCostTable.from_dict({"hosts": hosts})


def test_prior_takes_the_newest_generation() -> None:
    table = _generations()
    assert table.newest() == "v0.1"  # b/v0.1, timed last
    # Z held out: v0.1 keeps b/v0.1 alone (0.008); the range spans a, b and b/v0.1 (0.008-0.020)
    prior = table.prior(["Z"])
    assert prior.mid.eager_op_ms == pytest.approx(0.008)
    assert (prior.lo.eager_op_ms, prior.hi.eager_op_ms) == (0.008, 0.020)
    assert prior.source == "KernelBench v0.1 hosts (1, Z held out)"
    # no v0.1 host has a graph floor: the other chips' hosts of any generation (b: 0.05)
    assert prior.mid.graph_call_ms == pytest.approx(0.05)
    # v0 asked for: a and b, median of 0.010 and 0.020
    assert table.prior(["Z"], "v0").mid.eager_op_ms == pytest.approx(0.015)


def test_a_repeated_board_counts_once() -> None:
    import pandas as pd

    # A_copy holds A's v0 rows, A also its v0.1 ones; B differs on p2
    rows = [("A", "p1", "v0", 1.0), ("A", "p2", "v0", 2.0), ("A", "p1", "v0.1", 3.0),
            ("A_copy", "p1", "v0", 1.0), ("A_copy", "p2", "v0", 2.0),
            ("B", "p1", "v0", 1.0), ("B", "p2", "v0", 2.5)]
    df = pd.DataFrame(rows, columns=["board", "problem_file", "problem_set", "mean_ms"])
    df["mode"] = "eager"
    assert duplicate_boards(df) == {"A_copy"}


def test_the_shipped_table_holds_every_board_chip() -> None:
    table = load_host_costs()
    assert {"GA100", "GA102", "AD102"} <= set(table.chips.values())
    assert {"v0", "v0.1"} <= set(table.generations.values()) and table.newest() == "v0.1"
    assert "A6000_babel_v0.0" not in table.hosts  # A6000_babel's v0 timings again
    for costs in table.hosts.values():
        assert 0.0 < costs.eager_op_ms < 0.1  # tens of µs at most per op
        assert costs.eager_view_ms < costs.eager_op_ms  # a dispatcher hop, no launch
    assert "KernelBench" in table.provenance["data"]


def test_measure_host_on_the_cpu(tmp_path: Path) -> None:
    m = measure_host("cpu", ops=20, reps=3, warmup=1)
    assert len(m.op_ms) == 3 and all(t > 0 for t in m.op_ms + m.view_ms + m.call_ms)
    section = host_section(m, _table())
    c, lo, hi = section["costs"], section["lo"], section["hi"]
    assert lo["eager_op_ms"] <= c["eager_op_ms"] <= hi["eager_op_ms"]
    # the graph floor: the prior's (median over a, b, c: 0.06) scaled by this host's op
    # against the prior's median op (0.020)
    assert c["graph_call_ms"] == pytest.approx(0.06 * c["eager_op_ms"] / 0.020, abs=5e-5)  # 5 places
    # the compiled costs are v0's alone: scaled by this host's op against v0's median op
    # (0.015), their median kernel 0.040, not against the newer hosts' op
    newer = host_section(m, _generations())["costs"]
    assert newer["compiled_kernel_ms"] == pytest.approx(
        0.040 * newer["eager_op_ms"] / 0.015, abs=5e-5)
    prior = host_prior({"host": section}, get_device("l40s"))
    assert prior.mid.eager_op_ms == pytest.approx(c["eager_op_ms"], rel=1e-3)
    assert prior.source == "measured on cpu"
    assert with_host({"format": "x"}, section)["host"]["device"] == "cpu"


def test_calibrate_host_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.test_calibrate import cpu_spec, synthetic
    from torch_gemm_cost.calibrate import fit_profile, save_profile

    assert main(["calibrate", "--host", "--out", str(tmp_path)]) == 2  # no profile there yet
    assert "run calibrate with --budget-s first" in capsys.readouterr().err
    spec = cpu_spec(dram_bw_bytes_per_s=1e10)
    save_profile(tmp_path / "profile.json",
                 fit_profile(spec, synthetic(spec, rows=60), steps=20, hybrid_steps=0))
    assert main(["calibrate", "--host", "--device", "cpu", "--out", str(tmp_path)]) == 0
    assert "per op" in capsys.readouterr().out
    doc = json.loads((tmp_path / "profile.json").read_text())
    assert doc["host"]["device"] == "cpu"
    model, x = _mlp()
    rep = tgc.estimate(model, (x,), device=str(tmp_path / "profile.json"))
    assert rep.call is not None and rep.call.host == "measured on cpu"
    # a CPU runs each op as it issues it: the host's time and every kernel, one after another
    assert rep.total_ms == pytest.approx(rep.host_ms + rep.gpu_ms)


def test_one_node_is_one_issue() -> None:
    """An LSTM is one ATen call: cuDNN launches its steps from C++. 2 layers of 10 steps make
    2·(1 input GEMM + 10 step GEMMs) = 22 GEMMs and 2·10 cell kernels, all of one node: one
    issue carrying their 42 kernels' time."""
    lstm = torch.nn.LSTM(16, 32, num_layers=2, batch_first=True)
    rep = tgc.estimate(lstm, (torch.randn(4, 10, 16),), device="l40s", host=COSTS,
                       timing="kernel")
    assert rep.call is not None
    # the step kernels' records are named after the call's node: lstm_input.rnn_step.0.0.3
    nodes = {g.site.node for g in rep.gemms} | {o.op.node.partition(".")[0] for o in rep.others
                                                if o.op.op_class != "view"}
    in_node = [g.time_ms for g in rep.gemms if g.site.node == "lstm_input"] + [
        o.time_ms or 0.0 for o in rep.others if o.op.node.startswith("lstm_input.")]
    assert len(in_node) == 42
    kinds = [ISSUE_KINDS[k] for k in rep.call.issues.kind.tolist()]
    assert kinds.count("op") == len(nodes)
    assert max(rep.call.issues.gpu_ms.tolist()) == pytest.approx(sum(in_node))


def _host_rows(op_ms: float, view_ms: float, call_ms: float, extra: tuple[int, ...] = (0, 3)
               ) -> list[HostRow]:
    """Host-bound programs (kernels of 1 µs) of n ops, then n // 2 + k views (k in
    ``extra``), timed at exactly call + n·op + views·view."""
    rows = []
    for n in (4, 8, 16, 32, 64):
        for k in extra:
            views = n // 2 + k
            kind = torch.tensor([0] * n + [1] * views)
            gpu = torch.tensor([0.001] * n + [0.0] * views, dtype=torch.float64)
            seq = KernelSequence(gpu, kind, 0, False)
            # the last issue is a view: its kernel ended before; the host's sum is the time
            measured = call_ms + n * op_ms + views * view_ms
            rows.append(HostRow("h", "b", "v0", "2025-01-01", "l40s", "AD102", "eager",
                                f"p{n}_{k}", measured, seq, 0.0))
    return rows


def test_fit_recovers_the_eager_costs() -> None:
    # timed at the pulls' own values (2 µs view, 10 µs call) and 20 µs per op: the fit
    # finds them, each within 5%
    fit = fit_group(_host_rows(0.020, 0.002, 0.010), "eager", steps=400)
    assert fit["eager_op_ms"] == pytest.approx(0.020, rel=0.05)
    assert fit["eager_view_ms"] == pytest.approx(0.002, rel=0.05)
    assert fit["eager_call_ms"] == pytest.approx(0.010, rel=0.05)


def test_fit_pulls_a_view_it_cannot_place() -> None:
    # every program has n ops and n / 2 views, timed with 6 µs views: the timings see
    # 20 + 6 / 2 = 23 µs per op however they split it, so the view stays near its pull's
    # 2 µs and the op takes the rest, near 23 - 2 / 2 = 22 µs
    fit = fit_group(_host_rows(0.020, 0.006, 0.010, extra=(0,)), "eager", steps=400)
    assert fit["eager_view_ms"] == pytest.approx(0.002, rel=0.15)
    assert fit["eager_op_ms"] == pytest.approx(0.022, rel=0.05)
