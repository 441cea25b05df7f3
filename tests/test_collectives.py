"""The collective cost model: hand-worked ring arithmetic, the boundary checks, persistence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import torch_gemm_cost as tgc
from torch_gemm_cost.hardware.catalog import DeviceSpec, get_device
from torch_gemm_cost.predict.collectives import (
    ALGORITHMS,
    CollectiveBatch,
    CollectiveCall,
    CollectivePredictor,
    bandwidth_baseline_ms,
    candidate_times_ms,
    check_call,
    links_of,
    shipped_collective_weights_path,
)

GIB = 2**30
RING_SIMPLE = ALGORITHMS.index("ring/simple")


def hand_params(hop_us: float = 3.4) -> dict[str, torch.Tensor]:
    """Physical constants with every efficiency 1, no base latency, no local copy, and one
    per-hop latency for every protocol: what the hand arithmetic below assumes."""

    def t(x: object) -> torch.Tensor:
        return torch.tensor(x, dtype=torch.float64)

    return {
        "eta_link": t([1.0, 1.0, 1.0]),
        "ll_bw_fraction": t(0.5),
        "ll128_bw_fraction": t(0.92),
        "tree_bw_fraction": t(0.9),
        "base_us": t([0.0, 0.0, 0.0]),
        "hop_us": t([hop_us] * 3),
        "pcie_hop_scale": t(1.0),
        "net_hop_scale": t(1.0),
        "nvls_scale": t(1.0),
        "nvls_base_us": t(0.0),
        "kernel_offset_us": t(0.0),
        "local_chunks": t([0.0, 0.0, 0.0, 0.0]),
        "host_exponent": t(0.0),
        "latency_scale": t(1.0),
    }


def batch(*calls: CollectiveCall) -> CollectiveBatch:
    return CollectiveBatch.from_calls(list(calls))


def times(device: str, calls: list[CollectiveCall], p: dict[str, torch.Tensor]) -> torch.Tensor:
    """Every candidate's time (N, 7) of ``calls`` on the catalog's ``device``."""
    b = batch(*calls)
    return candidate_times_ms(b, links_of(b, get_device(device)), p)


def baseline(device: str, *calls: CollectiveCall) -> torch.Tensor:
    return bandwidth_baseline_ms(batch(*calls), get_device(device))


def test_ring_all_reduce_8_gpus_1_gib_by_hand():
    # 8 A100s over NVSwitch, NVLink 3 at B = 300e9 B/s each way, 1 GiB all-reduce, α = 3.4 µs:
    # bandwidth term 2·7/8·S/B = 1.75 · 1073741824 / 300e9 s = 6.263494 ms
    # latency term   2·7 steps · 3.4 µs = 47.6 µs = 0.0476 ms
    # total 6.311094 ms
    call = CollectiveCall("all_reduce", GIB, 8, 8, "dgx")
    t = times("a100_sxm4_80gb", [call], hand_params())[0, RING_SIMPLE]
    assert float(t) == pytest.approx(1.75 * GIB / 300e9 * 1e3 + 14 * 3.4e-3, rel=1e-9)
    assert float(t) == pytest.approx(6.311094, abs=1e-6)
    # the datasheet bound is the bandwidth term alone
    assert float(baseline("a100_sxm4_80gb", call)[0]) == pytest.approx(6.263494, abs=1e-6)


def test_all_gather_and_reduce_scatter_move_half_an_all_reduce():
    # ring all-reduce = reduce-scatter then all-gather: (n-1)/n·S each, 2(n-1)/n·S together;
    # with no latency the two halves each take half the all-reduce's time
    calls = [CollectiveCall(c, 256 * 2**20, 8, 8, "dgx", element_bytes=1)
             for c in ("all_reduce", "all_gather", "reduce_scatter")]
    t = times("h200_sxm_141gb", calls, hand_params(hop_us=0.0))[:, RING_SIMPLE]
    assert float(t[1]) == pytest.approx(float(t[0]) / 2, rel=1e-12)
    assert float(t[2]) == pytest.approx(float(t[0]) / 2, rel=1e-12)
    base = baseline("h200_sxm_141gb", *calls)
    assert float(base[1]) == pytest.approx(float(base[0]) / 2, rel=1e-12)


def test_two_nodes_are_limited_by_the_network():
    # two DGX A100 nodes, 8 GPUs each: NVLink gives 300e9 B/s per GPU, the network 8 NICs x
    # 25e9 B/s per node = 200e9 B/s for the rings leaving it, so the bus runs at 200e9 B/s:
    # 2·15/16·S / 200e9 = 1.875 · 1073741824 / 200e9 s = 10.066329 ms
    two_nodes = CollectiveCall("all_reduce", GIB, 16, 8, "dgx")
    assert float(baseline("a100_sxm4_80gb", two_nodes)[0]) == pytest.approx(10.066329, abs=1e-6)
    # one GPU on each of two nodes: one 200 Gb/s NIC, 25e9 B/s: 2·1/2·S / 25e9 = 42.949673 ms
    one_each = CollectiveCall("all_reduce", GIB, 2, 1, "dgx")
    assert float(baseline("a100_sxm4_80gb", one_each)[0]) == pytest.approx(42.949673, abs=1e-6)
    # 2 network steps of the 30: 28 at the NVLink hop latency, 2 at the network's (scale 4)
    p = hand_params(hop_us=1.0)
    p["net_hop_scale"] = torch.tensor(4.0, dtype=torch.float64)
    t = times("a100_sxm4_80gb", [two_nodes], p)[0, RING_SIMPLE]
    assert float(t) == pytest.approx(10.066329 + (28 * 1.0 + 2 * 4.0) * 1e-3, abs=1e-6)


def test_nvls_only_where_nccl_runs_it():
    p = hand_params()
    big = 512 * 2**20
    nvls = ALGORITHMS.index("nvls/simple")

    def runs_nvls(device: str, call: CollectiveCall) -> bool:
        return float(times(device, [call], p)[0, nvls]) < 1e20

    h200 = "h200_sxm_141gb"
    assert runs_nvls(h200, CollectiveCall("all_reduce", big, 8, 8, "dgx"))
    assert not runs_nvls(h200, CollectiveCall("all_reduce", big, 2, 2, "dgx"))
    assert not runs_nvls(h200, CollectiveCall("all_reduce", big, 8, 8, "dgx",
                                              element_bytes=1))  # no 8-bit multimem reduction
    assert not runs_nvls("a100_sxm4_80gb", CollectiveCall("all_reduce", big, 8, 8, "dgx"))
    assert not runs_nvls(h200, CollectiveCall("all_gather", big, 8, 8, "dgx"))


def test_pcie_node_and_nvlink_pairs_use_their_links():
    # L40S: PCIe Gen4 x16, 32e9 B/s each way; 2-GPU all-reduce moves S: 1 GiB / 32e9 = 33.554 ms
    l40s = baseline("l40s", CollectiveCall("all_reduce", GIB, 2, 2, "node"))
    assert float(l40s[0]) == pytest.approx(GIB / 32e9 * 1e3, rel=1e-12)
    # A40 pairs: inside a pair the NVLink bridge (56.25e9); 4 GPUs cross PCIe between pairs
    pair, four = baseline("a40", CollectiveCall("all_reduce", GIB, 2, 2, "pairwise_nvlink"),
                          CollectiveCall("all_reduce", GIB, 4, 4, "pairwise_nvlink"))
    assert float(pair) == pytest.approx(GIB / 56.25e9 * 1e3, rel=1e-12)
    assert float(four) == pytest.approx(1.5 * GIB / 32e9 * 1e3, rel=1e-12)


def test_defaults_follow_the_usual_node():
    call = check_call(get_device("h100_sxm5_80gb"), "all_reduce", size_bytes=1024, num_gpus=16)
    assert (call.topology, call.gpus_per_node) == ("node", 8)
    a40 = get_device("a40")
    assert check_call(a40, "all_reduce", size_bytes=1024, num_gpus=4).gpus_per_node == 4


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"collective": "allreduce"},
         "unknown collective 'allreduce'; did you mean 'all_reduce'?"),
        # matched as spelled with '_' for '-'
        ({"collective": "all-gather"},
         "unknown collective 'all-gather'; did you mean 'all_gather'?"),
        # none near: the topologies of an a100_sxm4_80gb
        ({"topology": "nvswitch"},
         "unknown topology 'nvswitch'; one of 'dgx', 'pairwise_nvlink', 'node'."),
        ({"device": "l40s", "topology": "dgx"}, "l40s has no NVSwitch node; nearest: 'node'"),
        ({"device": "l40s", "topology": "pairwise_nvlink"}, "no NVLink to bridge"),
        ({"size_bytes": 0}, "got 0; nearest good: 1"),
        ({"size_bytes": float("nan")}, "size_bytes must be a positive, finite number"),
        ({"num_gpus": 1}, "got 1; nearest good: 2"),
        ({"collective": "send_recv", "num_gpus": 4}, "num_gpus=4; nearest good: 2"),
        ({"num_gpus": 8, "gpus_per_node": 3}, "gpus_per_node=3 does not fit 8 GPUs"),
        ({"num_gpus": 8, "gpus_per_node": 16}, "nearest good: 8"),
        ({"device": "l40s", "num_gpus": 16}, "no usual inter-node network for l40s"),
    ],
)
def test_bad_input_names_the_value_and_the_nearest_good_one(kwargs, message):
    args = {"device": "a100_sxm4_80gb", "collective": "all_reduce", "size_bytes": 2**20,
            "num_gpus": 8, **kwargs}
    with pytest.raises(ValueError) as err:
        tgc.predict_collective_ms(args.pop("device"), args.pop("collective"), **args)
    assert message in str(err.value)


def test_unknown_device_is_the_catalogs_error():
    with pytest.raises(ValueError, match="unknown device 'h1000'"):
        tgc.predict_collective_ms("h1000", "all_reduce", size_bytes=1024, num_gpus=8)


def test_public_function_matches_the_shipped_predictor():
    model = CollectivePredictor.load(Path(str(shipped_collective_weights_path())))
    call = CollectiveCall("reduce_scatter", 3 * 2**20, 4, 4, "node")
    got = tgc.predict_collective_ms("b200", "reduce_scatter", size_bytes=3 * 2**20, num_gpus=4)
    assert got == pytest.approx(float(model.predict([call], get_device("b200")).time_ms[0]),
                                rel=1e-12)
    # more data never takes less time, and the time is at least the datasheet bandwidth bound
    sizes = [2**k for k in range(10, 31, 2)]
    times = [tgc.predict_collective_ms("b200", "all_reduce", size_bytes=s, num_gpus=8)
             for s in sizes]
    assert times == sorted(times)
    bound = baseline("b200", CollectiveCall("all_reduce", GIB, 8, 8))
    assert times[-1] > float(bound[0])


def _synthetic() -> tuple[list[CollectiveCall], list[DeviceSpec], torch.Tensor]:
    pairs = [(CollectiveCall(c, float(2**k), n, n, "node"), get_device(d))
             for d in ("a100_sxm4_80gb", "h200_sxm_141gb") for c in ("all_reduce", "all_gather")
             for n in (2, 8) for k in range(12, 30, 3)]
    calls, devices = [c for c, _ in pairs], [d for _, d in pairs]
    truth = CollectivePredictor.load(Path(str(shipped_collective_weights_path())))
    return calls, devices, truth.predict(calls, devices).time_ms


def test_fit_contract_is_seeded_and_round_trips_through_json(tmp_path):
    calls, devices, y = _synthetic()
    a = CollectivePredictor(steps=30, rows_per_group=3, seed=1)
    assert a.fit(calls, devices, y) is a
    b = CollectivePredictor(steps=30, rows_per_group=3, seed=1).fit(calls, devices, y)
    c = CollectivePredictor(steps=30, rows_per_group=3, seed=2).fit(calls, devices, y)
    assert all(torch.equal(a.raw_[k], b.raw_[k]) for k in a.raw_)  # same seed, same draw
    assert any(not torch.equal(a.raw_[k], c.raw_[k]) for k in a.raw_)
    assert a.n_train_rows_ == 2 * 2 * 2 * 3 and len(a.loss_history_) == 30
    path = a.save(tmp_path / "w.json", {"note": "test"})
    back = CollectivePredictor.load(path)
    assert torch.equal(back.predict(calls, devices).time_ms, a.predict(calls, devices).time_ms)
    assert back.get_params() == a.get_params() and back.metadata_ == {"note": "test"}


def test_fit_moves_toward_the_data():
    calls, devices, y = _synthetic()
    slow = y * 1.5  # everything 1.5x slower: the fit must land closer than where it starts
    start = CollectivePredictor(steps=0).fit(calls, devices, slow)
    fit = CollectivePredictor(steps=300, rows_per_group=100).fit(calls, devices, slow)

    def err(m: CollectivePredictor) -> float:
        return float((m.predict(calls, devices).time_ms.log() - slow.log()).abs().mean())

    assert err(fit) < 0.5 * err(start)


def test_bad_weight_files_name_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.json"):
        CollectivePredictor.load(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="bad.json is not valid JSON"):
        CollectivePredictor.load(bad)
    doc = json.loads(Path(str(shipped_collective_weights_path())).read_text())
    doc["version"] = "0"
    old = tmp_path / "old.json"
    old.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="version 0 weights"):
        CollectivePredictor.load(old)
    with pytest.raises(RuntimeError, match="not fitted"):
        CollectivePredictor().predict([CollectiveCall("all_reduce", 1.0, 2, 2)],
                                      get_device("b200"))


@pytest.mark.data
def test_shipped_weights_reproduce_their_in_sample_figure(data_dir):
    from torch_gemm_cost.measured.comm import load_comm, to_calls
    from torch_gemm_cost.train.collectives import in_sample_all_reduce

    if not (data_dir / "comm").is_dir():
        pytest.skip(f"collective measurements not found at {(data_dir / 'comm').resolve()}")
    model = CollectivePredictor.load(Path(str(shipped_collective_weights_path())))
    rows = load_comm(data_dir)
    calls, devices, kept, _ = to_calls(rows)
    by_row = dict(zip(kept, zip(calls, devices)))
    got = in_sample_all_reduce(rows, lambda idx: model.predict(
        [by_row[i][0] for i in idx], [by_row[i][1] for i in idx]).time_ms.tolist())
    recorded = model.metadata_["in_sample"]
    assert got["all_reduce_ge_64KiB"] == pytest.approx(recorded["all_reduce_ge_64KiB"], abs=1e-3)
    assert got["all_reduce_ge_64KiB_all_rows"] == pytest.approx(
        recorded["all_reduce_ge_64KiB_all_rows"], abs=1e-3)
