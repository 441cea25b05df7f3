"""Collective communication cost: NCCL's algorithms priced from a device record's links.

A collective over ``n`` GPUs, ``g`` per node, moves a known number of bytes per GPU over its
slowest link, in a known number of latency steps. The model mirrors the cost model NCCL uses to
choose an algorithm and protocol (NVIDIA/nccl ``src/graph/tuning.cc``): for each candidate

    time = base latency + hops · per-hop latency + bytes on the wire / bus bandwidth

and NCCL runs the fastest, so the prediction is the minimum over the candidates (a soft-min in
training). The candidates:

- **Ring** (every collective), with NCCL's three protocols: LL (8-byte stores carrying 4 bytes of
  data and a flag: low latency, a fraction of the bandwidth), LL128 (128-byte lines with an
  8-byte flag; NCCL enables it on NVLink only) and Simple. For ``S`` bytes (nccl-tests' size: the
  buffer of an all-reduce, the gathered output of an all-gather, the scattered input of a
  reduce-scatter, the per-rank buffer of an all-to-all):

    all_reduce      2(n−1) hops, 2(n−1)/n · S bytes per GPU (bus bandwidth = algbw · 2(n−1)/n)
    all_gather      (n−1) hops, (n−1)/n · S
    reduce_scatter  (n−1) hops, (n−1)/n · S
    alltoall        1 exchange with every peer at once, (n−1)/n · S
    send_recv       1 hop, S

  Of the hops, 2(nodes−1) (all-reduce) or nodes−1 cross the network and pay its latency.
- **Tree** (all-reduce across nodes): NCCL's double binary tree, 2·((g−1) intra-node hops +
  ⌈log2 nodes⌉ network hops), at a fraction of the bus bandwidth (algbw = busbw / 2).
- **NVLS** (all-reduce in one NVSwitch node of sm_90 or later, more than 2 GPUs, 16/32-bit
  elements): the switch reduces and multicasts (NVLink SHARP). NCCL enables it there
  (``src/transport/nvls.cc``: not for 2 GPUs or fewer, not across nodes; Simple protocol only),
  and ``multimem`` reductions have no 8-bit type. Its algorithm bandwidth is the NVLink
  bandwidth times NCCL's NVLS efficiency of the architecture (Hopper 0.85, Blackwell 0.74) times
  one fitted scale. NB: independent of n: NCCL's model scales it by n/(n−1), but the measured
  H200 gains nothing from NVLS at 4 GPUs and 1.3x at 8.

The bus bandwidth is the slowest link a GPU's traffic crosses, times a fitted efficiency per link
class (NVLink or Infinity Fabric, PCIe, network): inside a node the peer link (all of it through
an NVSwitch; one link per peer in a mesh; PCIe between the pairs of an NVLink-bridged node, and
in a PCIe-only node); across nodes the network's share per GPU times the g GPUs of a node whose
rings leave through g NICs (NCCL runs one ring channel per NIC).

NCCL's protocol constants (bandwidth fractions, base and per-hop latencies, the PCIe hop ratio)
are kept as its source has them. Fitted: an efficiency per link class, one scale on every
latency, the network hop's latency ratio, the NVLS scale and latency, the extra floor of
kernel-timed measurements (``TIMINGS``), and two effects NCCL's model lacks, both measured:

- each rank also moves its own S/n chunk through its SMs (``local_chunks`` chunks' worth): on
  every NVSwitch GPU measured, busbw at 2 GPUs is 10-30% below busbw at 8;
- the g > 2 GPUs of a PCIe-only node share the host's PCIe paths: per-GPU bandwidth times
  (2/g)^``host_exponent``. Only the L40S measured it (busbw falls about 4x per doubling of g).

Every fitted constant is shared by all GPUs (no per-GPU constant); bandwidths and the node
layout come from the device record handed to ``predict`` (``links_of`` reads them), so a GPU
from a spec file crosses its own links. NB: the network efficiency comes from one cluster,
Vidur's A100s, whose network delivered about a fifth of a DGX A100's 8x 200 Gb/s; a
DGX-networked cluster would run multi-node collectives faster than predicted.

``CollectivePredictor`` has the package's predictor contract, ``predict(calls, device) ->
Prediction`` (``kernel``: the NCCL algorithm each call runs), and fits the constants (the estimator contract: ``fit`` returns self,
fitted state ends in ``_``, seeded, JSON save/load); ``predict_collective_ms`` prices one call
with the shipped weights on any device ``resolve_target`` takes.

    >>> predict_collective_ms("h100_sxm5_80gb", "all_reduce", size_bytes=2**27,
    ...                       num_gpus=8)  # doctest: +SKIP
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..hardware.catalog import DeviceLike, DeviceSpec
from ..hardware.target import resolve_target
from ..suggest import nearest, unknown
from .base import Prediction, read_fitted
from .comm_profile import CommProfile, load_comm_profile
from .registry import SHIPPED, check_format, load_shipped, shipped_path

__all__ = [
    "ALGORITHMS",
    "COLLECTIVES",
    "HOST_SPREAD",
    "TIMINGS",
    "TOPOLOGIES",
    "CollectiveBatch",
    "CollectiveCall",
    "CollectiveLinks",
    "CollectivePredictor",
    "bandwidth_baseline_ms",
    "candidate_times_ms",
    "check_call",
    "collective_interval_ms",
    "links_of",
    "nccl_host_collective_ms",
    "predict_collective_ms",
    "shipped_collective_weights_path",
    "with_nccl_host",
]

COLLECTIVES: tuple[str, ...] = ("all_reduce", "all_gather", "reduce_scatter", "alltoall",
                                "send_recv")
# DATA.md's topology values: an NVSwitch node, NVLink-bridged pairs, the device's usual node
TOPOLOGIES: tuple[str, ...] = ("dgx", "pairwise_nvlink", "node")
FABRICS: tuple[str, ...] = ("nvswitch", "nvlink_pairs", "mesh", "pcie")
LINKS: tuple[str, ...] = ("nvlink", "pcie", "net")  # classes with their own efficiency
PROTOCOLS: tuple[str, ...] = ("ll", "ll128", "simple")
# candidate columns of candidate_times_ms, in order
ALGORITHMS: tuple[str, ...] = ("ring/ll", "ring/ll128", "ring/simple", "tree/ll", "tree/ll128",
                               "tree/simple", "nvls/simple")
# how a measurement was timed: nccl-tests' host-timed loop average (aiconfigurator), or the
# duration of the NCCL kernel in a profiler trace of rank 0 (vidur)
TIMINGS: tuple[str, ...] = ("nccl_tests", "kernel")
FORMAT = SHIPPED["collectives"].format
VERSION = 1
# NCCL's NVLS efficiency by architecture (compute capability major), src/graph/tuning.cc
# nvlsEfficiency: Hopper 0.85, Blackwell 0.74 (Volta and Ampere have no NVLS)
NVLS_EFFICIENCY: dict[int, float] = {9: 0.85, 10: 0.74}
_INF = 1e30  # the time of a candidate NCCL would not run
_UNLIMITED = 1e30  # the bandwidth of a link a call does not cross (finite: keeps gradients finite)

# NCCL's own constants (src/graph/tuning.cc): base latency per protocol (ring: LL 6.6, LL128 14,
# Simple 8.4 µs), per-hop latency on NVLink (LL 0.6, LL128 1.9, Simple 3.4 µs), PCIe about 1.7x
# and the network about 4x that; LL at 1/2 and LL128 at 0.92 of the bus bandwidth. They start the
# fit, and a weak pull toward them keeps constants the data cannot see where NCCL puts them.
PRIOR: dict[str, Any] = {
    "eta_link": [0.8, 0.75, 0.8],  # nvlink, pcie, net
    "ll_bw_fraction": 0.5,
    "ll128_bw_fraction": 0.92,
    "tree_bw_fraction": 0.9,
    "base_us": [6.6, 14.0, 8.4],  # ll, ll128, simple
    "hop_us": [0.6, 1.9, 3.4],
    "pcie_hop_scale": 1.7,
    "net_hop_scale": 4.0,
    "nvls_scale": 1.0,  # multiplies NCCL's NVLS efficiency of the architecture (NVLS_EFFICIENCY)
    "nvls_base_us": 25.0,
    "kernel_offset_us": 0.0,
    # not NCCL's: each rank's own chunk (S/n) moved through its SMs besides the ring traffic, in
    # chunks, per all_reduce, all_gather, reduce_scatter, alltoall; and the exponent of the host
    # path shared by the g > 2 GPUs of a PCIe-only node (1: its bandwidth divides among them)
    "local_chunks": [0.5, 0.5, 0.5, 0.5],
    "host_exponent": 1.0,
    "latency_scale": 1.0,  # multiplies every latency above
}
# NCCL's protocol structure is kept as its source has it (not fitted): the protocols' bandwidth
# fractions, their base and per-hop latencies and the PCIe hop ratio. One latency_scale adapts
# them all; with so few GPUs measured, freer latencies fit one GPU's quirks and transfer worse.
NCCL_CONSTANTS: tuple[str, ...] = ("ll_bw_fraction", "ll128_bw_fraction", "tree_bw_fraction",
                                   "base_us", "hop_us", "pcie_hop_scale")


# ---------------------------------------------------------------- records and their tensors
@dataclass(frozen=True)
class CollectiveCall:
    """One collective call. ``size_bytes`` follows nccl-tests (see the module docstring). The
    device is not part of the call: ``predict`` takes its record beside the calls."""

    collective: str
    size_bytes: float
    num_gpus: int
    gpus_per_node: int
    topology: str = "node"
    element_bytes: int = 2  # 1 for int8: no NVLS reduction
    timing: str = "nccl_tests"


@dataclass(frozen=True)
class CollectiveBatch:
    """N calls as tensors of shape (N,), on no device yet (``links_of`` adds the device's)."""

    size_bytes: torch.Tensor  # float64
    num_gpus: torch.Tensor  # float64
    gpus_per_node: torch.Tensor  # float64
    collective: torch.Tensor  # long, index into COLLECTIVES
    topology: torch.Tensor  # long, index into TOPOLOGIES
    element_bytes: torch.Tensor  # float64
    timing: torch.Tensor  # long, index into TIMINGS

    def __len__(self) -> int:
        return int(self.size_bytes.shape[0])

    @property
    def nodes(self) -> torch.Tensor:
        return self.num_gpus / self.gpus_per_node

    @classmethod
    def from_calls(cls, calls: Sequence[CollectiveCall]) -> CollectiveBatch:
        def col(values: Sequence[float], dtype: torch.dtype = torch.float64) -> torch.Tensor:
            return torch.tensor(list(values), dtype=dtype)

        return cls(
            size_bytes=col([float(c.size_bytes) for c in calls]),
            num_gpus=col([float(c.num_gpus) for c in calls]),
            gpus_per_node=col([float(c.gpus_per_node) for c in calls]),
            collective=col([COLLECTIVES.index(c.collective) for c in calls], torch.long),
            topology=col([TOPOLOGIES.index(c.topology) for c in calls], torch.long),
            element_bytes=col([float(c.element_bytes) for c in calls]),
            timing=col([TIMINGS.index(c.timing) for c in calls], torch.long),
        )


@dataclass(frozen=True)
class CollectiveLinks:
    """What the device record gives each call of a batch, (N,) each: the class and datasheet
    bandwidth (one direction) of the intra-node bottleneck, the network's share per GPU, NVLS."""

    intra_link: torch.Tensor  # long, index into LINKS
    intra_bw_bytes_per_s: torch.Tensor  # 1e30 with one GPU a node
    net_bw_bytes_per_s: torch.Tensor  # per GPU; 1e30 within a node, NaN where none is known
    nvls_bw_bytes_per_s: torch.Tensor  # NVLink bw x NCCL's NVLS efficiency; 0 without NVLS
    nvls: torch.Tensor  # bool
    # 2/g for the g > 2 GPUs of a PCIe-only node, whose flows share the host's PCIe paths; else 1
    host_share: torch.Tensor


def _device_columns(devices: Sequence[DeviceSpec]) -> dict[str, torch.Tensor]:
    """The link fields of each call's device record, (N,) each."""

    def col(values: Sequence[float]) -> torch.Tensor:
        return torch.tensor(list(values), dtype=torch.float64)

    majors = [int(d.compute_capability.split(".")[0]) if d.vendor == "NVIDIA" else 0
              for d in devices]
    return {
        "peer": col([d.peer_link_bw_bytes_per_s or 0.0 for d in devices]),
        "peer_links": col([float(d.peer_links) for d in devices]),
        "pcie": col([d.pcie_bw_bytes_per_s or 0.0 for d in devices]),
        "network": col([math.nan if d.network_bw_bytes_per_s is None
                        else d.network_bw_bytes_per_s for d in devices]),
        "major": col([float(m) for m in majors]),
        "nvls_efficiency": col([NVLS_EFFICIENCY.get(m, 0.0) for m in majors]),
    }


def links_of(batch: CollectiveBatch, device: DeviceSpec | Sequence[DeviceSpec]
             ) -> CollectiveLinks:
    """The links each call of ``batch`` crosses on ``device`` (one record for every call, or
    one per call): its record's peer link, PCIe, network and node fields, nothing else."""
    devices = [device] * len(batch) if isinstance(device, DeviceSpec) else list(device)
    if len(devices) != len(batch):
        raise ValueError(f"need one device for every call or one per call, got {len(devices)} "
                         f"devices for {len(batch)} calls")
    d = _device_columns(devices)
    g, n = batch.gpus_per_node, batch.num_gpus  # (N,)
    fabric = torch.tensor([FABRICS.index(fabric_of(dev, TOPOLOGIES[t]))
                           for dev, t in zip(devices, batch.topology.tolist())])  # (N,)
    is_fabric = {f: fabric == FABRICS.index(f) for f in FABRICS}
    one = g == 1
    nvlink = is_fabric["nvswitch"] | (is_fabric["nvlink_pairs"] & (g == 2))
    mesh = is_fabric["mesh"] & ~nvlink  # one direct link to each peer in the collective
    on_nvlink = one | nvlink | mesh
    mesh_bw = (d["peer"] / d["peer_links"].clamp(min=1.0)
               * torch.minimum(g - 1, d["peer_links"]))  # (N,)
    # else a PCIe-only node, or the PCIe between NVLink-bridged pairs
    intra = torch.where(one, torch.full_like(g, _UNLIMITED),
                        torch.where(nvlink, d["peer"], torch.where(mesh, mesh_bw, d["pcie"])))
    link = torch.where(on_nvlink, LINKS.index("nvlink"), LINKS.index("pcie"))
    net = torch.where(n == g, torch.full_like(n, _UNLIMITED), d["network"])
    nvls = (is_fabric["nvswitch"] & (d["major"] >= 9) & (n == g) & (n > 2)
            & (batch.collective == COLLECTIVES.index("all_reduce")) & (batch.element_bytes >= 2))
    host_share = torch.where(is_fabric["pcie"] & (g > 2), 2.0 / g, torch.ones_like(g))
    nvls_bw = torch.where(nvls, d["peer"] * d["nvls_efficiency"], torch.zeros_like(g))
    return CollectiveLinks(intra_link=link.long(), intra_bw_bytes_per_s=intra,
                           net_bw_bytes_per_s=net, nvls_bw_bytes_per_s=nvls_bw, nvls=nvls,
                           host_share=host_share)


def fabric_of(spec: DeviceSpec, topology: str) -> str:
    """The node fabric a topology value names on this device."""
    if topology == "node":
        return spec.node_fabric
    return "nvswitch" if topology == "dgx" else "nvlink_pairs"


# ---------------------------------------------------------------- the physics (pure, batched)
def physical(raw: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Fitted constants in their units from the unconstrained parameters."""
    sp = torch.nn.functional.softplus
    return {
        "eta_link": torch.sigmoid(raw["eta_link"]),  # (3,) nvlink, pcie, net
        "ll_bw_fraction": torch.sigmoid(raw["ll_bw_fraction"]),
        "ll128_bw_fraction": torch.sigmoid(raw["ll128_bw_fraction"]),
        "tree_bw_fraction": torch.sigmoid(raw["tree_bw_fraction"]),
        "base_us": sp(raw["base_us"]),  # (3,) per protocol
        "hop_us": sp(raw["hop_us"]),  # (3,) per protocol, on NVLink
        "pcie_hop_scale": sp(raw["pcie_hop_scale"]),
        "net_hop_scale": sp(raw["net_hop_scale"]),
        "nvls_scale": sp(raw["nvls_scale"]),
        "nvls_base_us": sp(raw["nvls_base_us"]),
        "kernel_offset_us": raw["kernel_offset_us"],
        "local_chunks": sp(raw["local_chunks"]),  # (4,)
        "host_exponent": sp(raw["host_exponent"]),
        "latency_scale": sp(raw["latency_scale"]),
    }


def _inverse_prior() -> dict[str, torch.Tensor]:
    """Unconstrained values whose ``physical`` image is PRIOR."""

    def logit(x: Any) -> torch.Tensor:
        t = torch.as_tensor(x, dtype=torch.float64)
        return torch.log(t / (1 - t))

    def isp(x: Any) -> torch.Tensor:
        t = torch.as_tensor(x, dtype=torch.float64)
        return t + torch.log(-torch.expm1(-t))

    kinds = {"eta_link": logit, "ll_bw_fraction": logit, "ll128_bw_fraction": logit,
             "tree_bw_fraction": logit, "nvls_scale": isp, "base_us": isp, "hop_us": isp,
             "pcie_hop_scale": isp, "net_hop_scale": isp, "nvls_base_us": isp,
             "local_chunks": isp, "host_exponent": isp, "latency_scale": isp,
             "kernel_offset_us": lambda x: torch.as_tensor(x, dtype=torch.float64)}
    return {k: f(PRIOR[k]) for k, f in kinds.items()}


def bus_bandwidth_bytes_per_s(batch: CollectiveBatch, links: CollectiveLinks,
                              eta_link: torch.Tensor, host_exponent: torch.Tensor | float = 0.0
                              ) -> torch.Tensor:
    """Per-GPU bottleneck bandwidth, one direction: min(intra-node link, node's network share).

    ``eta_link`` (3,) scales the datasheet figures and ``host_exponent`` the share of a PCIe-only
    node's host path; pass ones and 0 for the datasheet bound.
    """
    intra = (links.intra_bw_bytes_per_s * eta_link[links.intra_link]
             * links.host_share ** host_exponent)  # (N,)
    net = links.net_bw_bytes_per_s * batch.gpus_per_node * eta_link[LINKS.index("net")]  # (N,)
    return torch.minimum(intra, net)  # (N,)


def _wire(batch: CollectiveBatch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Bytes per GPU on the bottleneck link, ring hops, and of those the network hops. (N,)"""
    n, s, nodes = batch.num_gpus, batch.size_bytes, batch.nodes
    c = batch.collective
    is_ar = c == COLLECTIVES.index("all_reduce")
    is_p2p = c == COLLECTIVES.index("send_recv")
    is_a2a = c == COLLECTIVES.index("alltoall")
    share = torch.where(is_ar, 2 * (n - 1) / n, (n - 1) / n)  # (N,)
    share = torch.where(is_p2p, torch.ones_like(n), share)
    hops = torch.where(is_ar, 2 * (n - 1), n - 1)
    hops = torch.where(is_p2p | is_a2a, torch.ones_like(n), hops)
    net_hops = torch.where(is_ar, 2 * (nodes - 1), nodes - 1)
    net_hops = torch.where(is_p2p | is_a2a, (nodes > 1).double(), net_hops)
    return share * s, hops, net_hops


def candidate_times_ms(batch: CollectiveBatch, links: CollectiveLinks,
                       p: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """Time of every candidate (algorithm, protocol) in ``ALGORITHMS``; +1e30 where NCCL would not
    run it. ``p`` holds the physical constants (``physical(raw)``). Returns (N, 7) in ms."""
    bus = bus_bandwidth_bytes_per_s(batch, links, p["eta_link"], p["host_exponent"])  # (N,)
    wire, hops, net_hops = _wire(batch)  # (N,) each
    local = torch.cat([p["local_chunks"], torch.zeros(1, dtype=torch.float64)])  # (5,)
    wire = wire + local[batch.collective] * batch.size_bytes / batch.num_gpus  # (N,)
    intra_hops = hops - net_hops
    link_scale = torch.stack([torch.ones_like(p["pcie_hop_scale"]), p["pcie_hop_scale"],
                              p["net_hop_scale"]])  # (3,)
    hop_scale = link_scale[links.intra_link]  # (N,)
    proto_bw = torch.stack([p["ll_bw_fraction"], p["ll128_bw_fraction"],
                            torch.ones_like(p["ll_bw_fraction"])])  # (3,)
    base_us, hop_us = p["base_us"] * p["latency_scale"], p["hop_us"] * p["latency_scale"]  # (3,)
    lat_us = (base_us[None, :]
              + (intra_hops * hop_scale)[:, None] * hop_us[None, :]
              + (net_hops * p["net_hop_scale"])[:, None] * hop_us[None, :])  # (N, 3)
    ring = lat_us + 1e6 * wire[:, None] / (bus[:, None] * proto_bw[None, :])  # (N, 3) µs
    # LL128 runs on NVLink paths only (NCCL disables it elsewhere by default)
    no_ll128 = links.intra_link == LINKS.index("pcie")  # (N,)
    ring[:, 1] = torch.where(no_ll128, torch.full_like(ring[:, 1], _INF), ring[:, 1])

    g, nodes = batch.gpus_per_node, batch.nodes
    tree_hops = 2 * (g - 1)  # (N,)
    tree_net_hops = 2 * torch.ceil(torch.log2(nodes.clamp(min=1)))  # (N,)
    tree_lat = (base_us[None, :] + (tree_hops * hop_scale)[:, None] * hop_us[None, :]
                + (tree_net_hops * p["net_hop_scale"])[:, None] * hop_us[None, :])  # (N, 3)
    tree = tree_lat + 1e6 * 2 * batch.size_bytes[:, None] / (
        bus[:, None] * proto_bw[None, :] * p["tree_bw_fraction"])  # (N, 3) µs
    tree_ok = (batch.collective == COLLECTIVES.index("all_reduce")) & (nodes > 1)  # (N,)
    tree = torch.where(tree_ok[:, None], tree, torch.full_like(tree, _INF))
    tree[:, 1] = torch.where(no_ll128, torch.full_like(tree[:, 1], _INF), tree[:, 1])

    nvls_bw = links.nvls_bw_bytes_per_s * p["nvls_scale"]  # (N,)
    nvls = (p["nvls_base_us"] * p["latency_scale"]
            + 1e6 * batch.size_bytes / nvls_bw.clamp(min=1.0))  # (N,) µs
    nvls = torch.where(links.nvls, nvls, torch.full_like(nvls, _INF))[:, None]  # (N, 1)

    offset = torch.where(batch.timing == TIMINGS.index("kernel"), p["kernel_offset_us"],
                         torch.zeros_like(batch.size_bytes))  # (N,)
    times = torch.cat([ring, tree, nvls], dim=1) + offset[:, None]  # (N, 7) µs
    return (times * 1e-3).clamp(min=1e-4)


def bandwidth_baseline_ms(batch: CollectiveBatch, device: DeviceSpec | Sequence[DeviceSpec]
                          ) -> torch.Tensor:
    """The pure bandwidth bound, no fitted parameter and no latency: ring bytes per GPU over the
    datasheet bottleneck link of ``device`` (one record, or one per call). (N,) ms."""
    wire, _, _ = _wire(batch)
    return 1e3 * wire / bus_bandwidth_bytes_per_s(batch, links_of(batch, device),
                                                  torch.ones(3, dtype=torch.float64))


# ---------------------------------------------------------------- the estimator
_HYPER = ("steps", "lr", "softmin_tau", "huber_delta", "prior_weight", "rows_per_group", "seed",
          "frozen")


class CollectivePredictor:
    """The fitted collective model. ``fit`` adjusts the shared physical constants on measured
    calls by Adam on a Huber loss of the log time ratio (relative error, robust to a few groups no
    shared constant can explain), each (device, collective, topology, n, g, timing, element)
    group weighing the same. ``rows_per_group`` caps each group with a seeded draw."""

    name = "collectives"
    version = str(VERSION)

    def __init__(self, *, steps: int = 1500, lr: float = 0.03, softmin_tau: float = 0.05,
                 huber_delta: float = 0.3, prior_weight: float = 1e-5, rows_per_group: int = 300,
                 seed: int = 0, frozen: Sequence[str] = NCCL_CONSTANTS) -> None:
        self.steps = steps
        self.lr = lr
        self.softmin_tau = softmin_tau
        self.huber_delta = huber_delta
        self.prior_weight = prior_weight
        self.rows_per_group = rows_per_group
        self.seed = seed
        self.frozen = tuple(frozen)  # constants held at PRIOR, not fitted
        self.metadata_: dict[str, Any] = {}

    def get_params(self) -> dict[str, Any]:
        return {k: list(v) if k == "frozen" else v for k in _HYPER
                for v in [getattr(self, k)]}

    # -- fitting
    def fit(self, calls: Sequence[CollectiveCall], devices: Sequence[DeviceSpec],
            latency_ms: Sequence[float] | torch.Tensor) -> CollectivePredictor:
        """Fit to measured ``calls``, each on its own device record (``devices``, one per
        call) and with its measured time. Returns self."""
        y = torch.as_tensor(latency_ms, dtype=torch.float64).reshape(-1)
        if not len(calls) == len(devices) == y.shape[0] or not len(calls):
            raise ValueError(f"need one device and one latency per call, got {len(calls)} "
                             f"calls, {len(devices)} devices and {y.shape[0]} latencies")
        if not bool((y > 0).all()):
            raise ValueError("every measured latency must be positive")
        gen = torch.Generator().manual_seed(self.seed)
        groups: dict[tuple[Any, ...], list[int]] = {}
        for i, c in enumerate(calls):
            key = (devices[i].id, c.collective, c.topology, c.num_gpus, c.gpus_per_node, c.timing,
                   c.element_bytes)
            groups.setdefault(key, []).append(i)
        chosen: list[int] = []
        weights: list[float] = []
        for idx in groups.values():
            if len(idx) > self.rows_per_group:
                pick = torch.randperm(len(idx), generator=gen)[: self.rows_per_group]
                idx = [idx[j] for j in sorted(pick.tolist())]
            chosen += idx
            weights += [1.0 / len(idx)] * len(idx)
        batch = CollectiveBatch.from_calls([calls[i] for i in chosen])
        links = links_of(batch, [devices[i] for i in chosen])
        target = y[chosen].log()  # (M,)
        w = torch.tensor(weights, dtype=torch.float64)
        w = w / w.sum()  # (M,)
        prior = _inverse_prior()
        unknown = set(self.frozen) - set(prior)
        if unknown:
            raise ValueError(f"frozen names unknown constants {sorted(unknown)}; "
                             f"known: {', '.join(prior)}")
        raw = {k: v.clone().requires_grad_(k not in self.frozen) for k, v in prior.items()}
        opt = torch.optim.Adam([v for k, v in raw.items() if k not in self.frozen], lr=self.lr)
        history: list[float] = []
        for _ in range(self.steps):
            opt.zero_grad()
            times = candidate_times_ms(batch, links, physical(raw))  # (M, 7)
            log_t = -self.softmin_tau * torch.logsumexp(-times.log() / self.softmin_tau, dim=1)
            r = log_t - target  # (M,)
            huber = torch.nn.functional.huber_loss(r, torch.zeros_like(r), reduction="none",
                                                   delta=self.huber_delta)
            pull = sum(((raw[k] - prior[k]) ** 2).sum() for k in raw if k != "kernel_offset_us")
            loss = (w * huber).sum() + self.prior_weight * pull
            loss.backward()
            opt.step()
            history.append(loss.item())
        self.raw_ = {k: v.detach() for k, v in raw.items()}
        self.loss_history_ = history
        self.n_train_rows_ = len(chosen)
        self.n_groups_ = len(groups)
        return self

    def _physical(self) -> dict[str, torch.Tensor]:
        if not hasattr(self, "raw_"):
            raise RuntimeError("this CollectivePredictor is not fitted: call fit() or load()")
        return physical(self.raw_)

    # -- prediction
    def predict(self, calls: Sequence[CollectiveCall] | CollectiveBatch,
                device: DeviceSpec | Sequence[DeviceSpec]) -> Prediction:
        """The calls' times on ``device``: one record for every call (a catalog GPU, a spec
        file's), or one per call. Only the record's links and node are read (``links_of``)."""
        batch = calls if isinstance(calls, CollectiveBatch) else CollectiveBatch.from_calls(calls)
        links = links_of(batch, device)
        with torch.no_grad():
            times = candidate_times_ms(batch, links, self._physical())  # (N, 7)
            best, which = times.min(dim=1)  # (N,)
            wire, _, _ = _wire(batch)
        return Prediction(time_ms=best, kernel=tuple(ALGORITHMS[i] for i in which.tolist()),
                          details={"bus_bw_bytes_per_s": 1e3 * wire / best})

    def physical_constants(self) -> dict[str, Any]:
        """The fitted constants in their units (for reports and metadata)."""
        p = self._physical()
        out: dict[str, Any] = {}
        for k, v in p.items():
            if k == "eta_link":
                out[k] = dict(zip(LINKS, v.tolist()))
            elif k in ("base_us", "hop_us"):
                out[k] = dict(zip(PROTOCOLS, v.tolist()))
            elif k == "local_chunks":
                out[k] = dict(zip(COLLECTIVES, v.tolist()))
            else:
                out[k] = float(v)
        return out

    # -- persistence
    def to_dict(self, metadata: Mapping[str, Any] | None = None) -> dict[str, Any]:
        self._physical()
        return {
            "format": FORMAT,
            "version": self.version,
            "hyperparameters": self.get_params(),
            "schema": {"links": list(LINKS), "protocols": list(PROTOCOLS),
                       "algorithms": list(ALGORITHMS), "timings": list(TIMINGS)},
            "params": {k: v.tolist() for k, v in self.raw_.items()},
            "physical_constants": self.physical_constants(),
            "metadata": dict(metadata or self.metadata_),
        }

    def save(self, path: str | os.PathLike[str], metadata: Mapping[str, Any] | None = None
             ) -> Path:
        path = Path(path)
        path.write_text(json.dumps(self.to_dict(metadata), indent=1) + "\n")
        return path

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> CollectivePredictor:
        """Weights written by ``save``. A missing, corrupt or mismatched file raises an error
        that names the file."""
        return read_fitted(path, "collective weights file", FORMAT, cls.from_dict)

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> CollectivePredictor:
        check_format(doc, "collectives", cls.version)
        hyper = dict(doc["hyperparameters"])
        unknown = set(hyper) - set(_HYPER)
        if unknown:
            raise ValueError(f"unknown hyperparameters {sorted(unknown)}")
        model = cls(**hyper)
        expected = _inverse_prior()
        raw: dict[str, torch.Tensor] = {}
        for name, ref in expected.items():
            if name not in doc["params"]:
                raise ValueError(f"missing parameter {name!r}")
            t = torch.tensor(doc["params"][name], dtype=torch.float64)
            if t.shape != ref.shape or not bool(torch.isfinite(t).all()):
                raise ValueError(f"parameter {name!r} has shape {tuple(t.shape)} or is not "
                                 f"finite; expected shape {tuple(ref.shape)}")
            raw[name] = t
        model.raw_ = raw
        model.metadata_ = dict(doc.get("metadata", {}))
        return model


# ---------------------------------------------------------------- the public question
def _unknown(kind: str, value: Any, good: Sequence[str]) -> str:
    """``suggest.unknown`` with ``value`` matched as spelled lower case, '-' as '_'."""
    return unknown(kind, value, good, close=nearest(str(value).lower().replace("-", "_"), good))


def topologies_of(spec: DeviceSpec) -> tuple[str, ...]:
    """The topology values that make sense on this device."""
    out = ["node"]
    if spec.node_fabric == "nvswitch":
        out.insert(0, "dgx")
    if spec.peer_link is not None and spec.peer_link.startswith("NVLink"):
        out.insert(-1, "pairwise_nvlink")
    return tuple(out)


def check_call(spec: DeviceSpec, collective: str, *, size_bytes: float, num_gpus: int,
               gpus_per_node: int | None = None, topology: str | None = None,
               element_bytes: int = 2, timing: str = "nccl_tests") -> CollectiveCall:
    """Validate a call on the device ``spec`` at the boundary and fill the defaults: the
    device's usual node, and as many GPUs a node as it holds. Each error names the bad value and
    the nearest good one."""
    if collective not in COLLECTIVES:
        raise ValueError(_unknown("collective", collective, COLLECTIVES))
    if timing not in TIMINGS:
        raise ValueError(_unknown("timing", timing, TIMINGS))
    good_topo = topologies_of(spec)
    topo = "node" if topology is None else topology
    if topo not in TOPOLOGIES:
        raise ValueError(_unknown("topology", topology, good_topo))
    if topo not in good_topo:
        why = ("has no NVSwitch node" if topo == "dgx" else "has no NVLink to bridge in pairs")
        raise ValueError(f"topology {topo!r}: {spec.id} {why}; nearest: {good_topo[0]!r} "
                         f"(valid on {spec.id}: {', '.join(good_topo)})")
    if isinstance(size_bytes, bool) or not isinstance(size_bytes, (int, float)) or not (
            math.isfinite(size_bytes) and size_bytes > 0):
        raise ValueError(f"size_bytes must be a positive, finite number of bytes, got "
                         f"{size_bytes!r}; nearest good: 1")
    if isinstance(num_gpus, bool) or not isinstance(num_gpus, int) or num_gpus < 2:
        near = max(2, int(num_gpus)) if isinstance(num_gpus, (int, float)) and math.isfinite(
            num_gpus) else 2
        raise ValueError(f"num_gpus must be an integer of at least 2, got {num_gpus!r}; "
                         f"nearest good: {near}")
    if collective == "send_recv" and num_gpus != 2:
        raise ValueError(f"send_recv runs between 2 GPUs, got num_gpus={num_gpus}; nearest good: 2")
    fabric = fabric_of(spec, topo)
    node_max = 2 if fabric == "nvlink_pairs" and spec.node_gpus < 2 else spec.node_gpus
    if gpus_per_node is None:
        gpus_per_node = min(num_gpus, node_max)
        while num_gpus % gpus_per_node:
            gpus_per_node -= 1
    good_g = [d for d in range(1, node_max + 1) if num_gpus % d == 0]
    if (isinstance(gpus_per_node, bool) or not isinstance(gpus_per_node, int)
            or gpus_per_node not in good_g):
        near = min(good_g, key=lambda d: abs(d - gpus_per_node)) if isinstance(
            gpus_per_node, (int, float)) else good_g[-1]
        raise ValueError(f"gpus_per_node={gpus_per_node!r} does not fit {num_gpus} GPUs in "
                         f"{spec.id} nodes of up to {node_max}; nearest good: {near}")
    if gpus_per_node < num_gpus and (spec.network_bw_bytes_per_s is None
                                      or fabric != spec.node_fabric):
        raise ValueError(f"{num_gpus} GPUs at {gpus_per_node} a node span nodes, and the device "
                         f"record has no usual inter-node network for {spec.id} in topology "
                         f"{topo!r}; "
                         f"nearest good: gpus_per_node={num_gpus if num_gpus <= node_max else 1}"
                         f" within one node")
    return CollectiveCall(collective, float(size_bytes), num_gpus, gpus_per_node, topo,
                          element_bytes, timing)


def shipped_collective_weights_path():  # -> importlib.resources.abc.Traversable
    """Where the package's fitted collective constants live."""
    return shipped_path("collectives")


def _shipped() -> CollectivePredictor:
    return load_shipped("collectives", CollectivePredictor.from_dict)


def predict_collective_ms(device: DeviceLike, collective: str, *, size_bytes: float,
                          num_gpus: int, gpus_per_node: int | None = None,
                          topology: str | None = None,
                          comm_profile: CommProfile | str | os.PathLike[str] | None = None
                          ) -> float:
    """Predicted time of one NCCL collective, in ms, as nccl-tests would time it.

    ``device`` is any device ``resolve_target`` takes: a catalog id or driver name, a
    ``DeviceSpec``, a spec file or a calibration profile; the links, node and network of its
    record are what the collective crosses (a spec file's own, not the catalog's).

    ``collective`` is one of ``all_reduce``, ``all_gather``, ``reduce_scatter``, ``alltoall``,
    ``send_recv``; ``size_bytes`` follows nccl-tests: the buffer of an all-reduce (the tensor
    each rank holds), the gathered output of an all-gather, the scattered input of a
    reduce-scatter, the per-rank buffer of an all-to-all, the message of a send/recv.
    ``topology`` is ``"dgx"`` (an NVSwitch node), ``"pairwise_nvlink"`` (NVLink-bridged pairs
    that meet over PCIe) or ``"node"``, the device's usual node (the default); ``gpus_per_node``
    defaults to as many of ``num_gpus`` as that node holds. Elements are taken as 16-bit (fp16 or
    bf16, what tensor parallelism reduces), which NVLS can reduce.

    ``comm_profile`` (a ``CommProfile`` or its JSON file, ``torch-gemm-cost calibrate-comm``)
    prices the call from a cluster's nccl-tests measurements where they cover its group and
    size (``predict.comm_profile``); elsewhere the collective model does.
    """
    spec = resolve_target(device).spec
    call = check_call(spec, collective, size_bytes=size_bytes, num_gpus=num_gpus,
                      gpus_per_node=gpus_per_node, topology=topology)
    if comm_profile is not None:
        measured = load_comm_profile(comm_profile).time_ms(
            call.collective, call.size_bytes, call.num_gpus, call.gpus_per_node)
        if measured is not None:
            return measured
    return float(_shipped().predict([call], spec).time_ms[0])


# the constants that differ from host to host: each link's efficiency, the latencies, the
# network hop's latency ratio (the measured systems' latency floors and ring efficiencies differ
# by host, driver and NCCL build, which no device record holds)
HOST_CONSTANTS: tuple[str, ...] = ("eta_link", "latency_scale", "net_hop_scale")


# measured / predicted time of a host the prior never saw, within one node: its 10th and 90th
# percentile over the measured hosts' rows of 64 KiB or more (each host weighing the same; the
# prior fitted without the host's GPU), as `python benchmarks/comm_profile_heldout.py --seed 0`
# computes it. Across nodes only one cluster was measured, so no held-out spread exists there.
HOST_SPREAD: tuple[float, float] = (0.70, 8.49)


def collective_interval_ms(device: DeviceLike, collective: str, *, size_bytes: float,
                           num_gpus: int, gpus_per_node: int | None = None,
                           topology: str | None = None) -> tuple[float, float]:
    """How far hosts spread around ``predict_collective_ms``'s prior, low first: the call priced
    with the shipped host constants (``HOST_CONSTANTS``: fitted on the measured clusters, Vidur's
    A100 network among them) and with NCCL's own (its tuning model's latencies, 0.8 of every
    link's datasheet bandwidth, a DGX-networked cluster); within one node widened to the
    held-out spread of measured hosts, the prior times ``HOST_SPREAD``."""
    spec = resolve_target(device).spec
    call = check_call(spec, collective, size_bytes=size_bytes, num_gpus=num_gpus,
                      gpus_per_node=gpus_per_node, topology=topology)
    fitted = float(_shipped().predict([call], spec).time_ms[0])
    nccl = float(_nccl_host().predict([call], spec).time_ms[0])
    lo, hi = (HOST_SPREAD if call.gpus_per_node == call.num_gpus else (1.0, 1.0))
    return min(fitted * lo, nccl), max(fitted * hi, nccl)


def nccl_host_collective_ms(device: DeviceLike, collective: str, *, size_bytes: float,
                            num_gpus: int, gpus_per_node: int | None = None,
                            topology: str | None = None) -> float:
    """The call priced with NCCL's own host constants (``with_nccl_host``: its tuning model's
    latencies, 0.8 of every link's datasheet bandwidth), the shipped fit's others: a
    DGX-networked host, the fast end of ``collective_interval_ms`` before the host spread."""
    spec = resolve_target(device).spec
    call = check_call(spec, collective, size_bytes=size_bytes, num_gpus=num_gpus,
                      gpus_per_node=gpus_per_node, topology=topology)
    return float(_nccl_host().predict([call], spec).time_ms[0])


def _nccl_host() -> CollectivePredictor:
    return with_nccl_host(_shipped())


def with_nccl_host(model: CollectivePredictor) -> CollectivePredictor:
    """``model``'s constants with the host ones (``HOST_CONSTANTS``) at NCCL's values: the
    other end of ``collective_interval_ms`` for any fitted model (a held-out one too)."""
    model._physical()  # fitted or loaded
    out = CollectivePredictor(**model.get_params())
    prior = _inverse_prior()
    out.raw_ = {k: prior[k] if k in HOST_CONSTANTS else v for k, v in model.raw_.items()}
    return out
