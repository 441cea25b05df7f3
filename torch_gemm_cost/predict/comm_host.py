"""What a user states about a cluster's network when no comm profile measures it: the host class
that prices its collectives, and the NICs of its nodes.

Without measurements, a collective is priced from the device record's links (NVLink/NVSwitch,
PCIe, the network's share per GPU) at one set of host constants
(``predict.collectives.HOST_CONSTANTS``: each link class's efficiency, the latencies, the network
hop's latency ratio). Two classes:

- ``fitted`` (the default): the shipped fit, from the measured clusters: aiconfigurator's single
  nodes and Vidur's one cloud A100 cluster, the only multi-node data, whose network delivered
  about a fifth of its datasheet rate;
- ``reference``: NCCL's own tuning constants (its protocol latencies, 0.8 of every NVLink and
  network link's datasheet bandwidth, 0.75 of PCIe's), as a reference-architecture DGX/HGX
  cluster with GPUDirect RDMA on every NIC runs (``collectives.with_nccl_host``).

``with_nics`` restates the network of the device record (``DeviceSpec.network``): NICs a node
and each one's speed, for a cluster built otherwise than the record's usual node, or a GPU whose
record has no usual network.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from ..hardware.catalog import DeviceLike, DeviceSpec
from ..suggest import check_choice
from .collectives import LINKS, _shipped, nccl_host_collective_ms, predict_collective_ms

__all__ = ["COMM_HOSTS", "NIC_GBPS", "check_comm_host", "describe_comm_host",
           "host_collective_ms", "with_nics"]

COMM_HOSTS: tuple[str, ...] = ("fitted", "reference")
# common NIC speeds in Gb/s (EDR, HDR, NDR, XDR InfiniBand; 100-800 GbE): the nearest good value
NIC_GBPS: tuple[float, ...] = (100.0, 200.0, 400.0, 800.0)


def check_comm_host(host: Any) -> str:
    """``host`` where it is a host class (``COMM_HOSTS``), else a ValueError naming it and the
    nearest good one."""
    value = host.lower() if isinstance(host, str) else host
    return check_choice("comm_host", value, COMM_HOSTS)


def host_collective_ms(device: DeviceLike, collective: str, *, host: str, size_bytes: float,
                       num_gpus: int, gpus_per_node: int | None = None,
                       topology: str | None = None) -> float:
    """One call priced at the host constants of ``host`` (``COMM_HOSTS``):
    ``predict_collective_ms`` for ``fitted``, ``nccl_host_collective_ms`` for ``reference``."""
    price = predict_collective_ms if check_comm_host(host) == "fitted" else \
        nccl_host_collective_ms
    return price(device, collective, size_bytes=size_bytes, num_gpus=num_gpus,
                 gpus_per_node=gpus_per_node, topology=topology)


def describe_comm_host(host: str) -> str:
    """What the host class ``host`` assumes, with its source (the fitted efficiencies read off
    the shipped constants)."""
    if check_comm_host(host) == "reference":
        return ("host class 'reference': NCCL's own tuning constants (src/graph/tuning.cc: its "
                "protocol latencies, 0.8 of every NVLink and network link's datasheet "
                "bandwidth, 0.75 of PCIe's), as a reference-architecture DGX/HGX cluster with "
                "GPUDirect RDMA on every NIC runs; stated by the user, not measured")
    eta = _shipped()._physical()["eta_link"].tolist()
    nvlink, pcie, net = (eta[LINKS.index(k)] for k in ("nvlink", "pcie", "net"))
    return (f"host class 'fitted' (the default): the shipped fit, from aiconfigurator's single "
            f"nodes and one cloud A100 cluster (Vidur's, the only multi-node data), reaching "
            f"{nvlink:.2f} of NVLink's datasheet bandwidth, {pcie:.2f} of PCIe's and "
            f"{net:.2f} of the network's; a reference-architecture DGX/HGX cluster runs "
            f"multi-node collectives faster (comm_host='reference')")


def with_nics(spec: DeviceSpec, *, nics_per_node: int | None = None,
              nic_gbps: float | None = None) -> DeviceSpec:
    """``spec`` with its network restated: ``nics_per_node`` NICs of ``nic_gbps`` Gb/s each
    (one direction) shared by the node's ``spec.node_gpus`` GPUs. ``nics_per_node`` defaults
    to one a GPU, as NCCL's reference nodes have; ``nic_gbps`` is needed whenever either is
    given. Neither given: ``spec`` as it is."""
    if nics_per_node is None and nic_gbps is None:
        return spec
    if nic_gbps is None:
        raise ValueError(f"nics_per_node={nics_per_node!r} needs nic_gbps, each NIC's speed in "
                         "Gb/s; nearest good: nic_gbps=200 (HDR InfiniBand)")
    if isinstance(nic_gbps, bool) or not isinstance(nic_gbps, (int, float)) or not (
            math.isfinite(nic_gbps) and nic_gbps > 0):
        near = (min(NIC_GBPS, key=lambda g: abs(g - nic_gbps))
                if isinstance(nic_gbps, (int, float)) and math.isfinite(nic_gbps) else 200.0)
        raise ValueError(f"nic_gbps must be a positive number of Gb/s a NIC, got "
                         f"{nic_gbps!r}; nearest good: {near:g}")
    nics = spec.node_gpus if nics_per_node is None else nics_per_node
    if isinstance(nics, bool) or not isinstance(nics, int) or nics < 1:
        near = max(1, round(nics)) if isinstance(nics, (int, float)) and math.isfinite(
            nics) else spec.node_gpus
        raise ValueError(f"nics_per_node must be a positive integer, got {nics!r}; nearest "
                         f"good: {near}")
    per_gpu = nics * nic_gbps * 1e9 / 8 / spec.node_gpus  # bytes/s, one direction
    return replace(spec, network=f"{nics}x {nic_gbps:g} Gb/s per {spec.node_gpus} GPUs "
                                 "(stated by the user)",
                   network_bw_bytes_per_s=per_gpu)
