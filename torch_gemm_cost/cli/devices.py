"""``torch-gemm-cost devices``: the catalog with peaks and bandwidths, a spec file's devices,
or a spec record to fill in for a GPU the catalog lacks.

    torch-gemm-cost devices [MATCH] [--json]
    torch-gemm-cost devices my_gpu.json          # check a spec file: its devices, or each problem
    torch-gemm-cost devices --template [--like ID] > my_gpu.json

The template is JSON on stdout, so it can be redirected into the file to fill in; JSON has no
comments, so each field's unit and fallback sit in a ``"_help"`` object of the record (fields
starting with ``_`` are ignored when it is read back), where they stay beside the values while
the file is edited. The next steps go to stderr, which a redirect leaves on the terminal.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from . import UsageError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "devices", help="list the device catalog, check a spec file, or print a spec template",
        description="List the catalog (or the devices MATCH names, or those of the spec file "
                    "MATCH), or print a spec record to fill in for a GPU the catalog lacks.")
    p.add_argument("match", nargs="?",
                   help="only devices whose id or name contains this text; or a spec file to "
                        "check")
    p.add_argument("--json", action="store_true", help="print the records as JSON")
    p.add_argument("--template", action="store_true",
                   help="print a spec record (gpus.json's fields, units in the names) to fill "
                        "in, for --device FILE")
    p.add_argument("--like", metavar="ID",
                   help="with --template: pre-fill it from this catalog GPU")
    p.set_defaults(run=run)


def _template(args: argparse.Namespace) -> int:
    from ..hardware.catalog import get_device
    from ..hardware.datasheet import template

    if args.match or args.json:
        raise UsageError("--template prints one record; it takes --like ID, not MATCH or --json")
    like = get_device(args.like) if args.like else None
    print(json.dumps(template(like), indent=1))
    source = (f", pre-filled from {like.id} ({like.name}): check each value against your "
              "GPU's datasheet" if like else "")
    print(f"a spec record{source}. Save it (> my_gpu.json), set id and name, fill in the nulls "
          "from the datasheet (units in the field names, every peak dense; '_help' says "
          "each field's unit and fallback), check it with `torch-gemm-cost devices "
          "my_gpu.json`, then estimate with --device my_gpu.json", file=sys.stderr)
    return 0


def run(args: argparse.Namespace) -> int:
    from ..hardware.catalog import list_devices, spec_to_record
    from ..hardware.datasheet import load_spec_file
    from ..report import format_device_table

    if args.like and not args.template:
        raise UsageError("--like ID goes with --template")
    if args.template:
        return _template(args)
    devices = list_devices()
    if args.match and Path(args.match).is_file():
        devices = load_spec_file(args.match)  # each problem named, fallbacks warned
    elif args.match:
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
