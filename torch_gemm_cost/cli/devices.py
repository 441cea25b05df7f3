"""``torch-gemm-cost devices``: the catalog with peaks and bandwidths."""

from __future__ import annotations

import argparse
import json

from . import UsageError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("devices", help="list the device catalog with peaks and bandwidths")
    p.add_argument("match", nargs="?", help="only devices whose id or name contains this text")
    p.add_argument("--json", action="store_true", help="print the records as JSON")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..devices import list_devices, spec_to_record
    from ..report import format_device_table

    devices = list_devices()
    if args.match:
        key = args.match.lower()
        devices = [d for d in devices if key in d.id.lower() or key in d.name.lower()
                   or any(key in a.lower() for a in d.aliases)]
        if not devices:
            raise UsageError(f"no catalog device matches {args.match!r}; run `devices` for all")
    if args.json:
        print(json.dumps([spec_to_record(d) for d in devices], indent=2))
    else:
        print(format_device_table(devices))
    return 0
