"""``torch-gemm-cost devices``: the catalog with peaks and bandwidths."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("devices", help="list the device catalog with peaks and bandwidths")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..report import format_device_table
    from ..devices import list_devices

    print(format_device_table(list_devices()))
    return 0
