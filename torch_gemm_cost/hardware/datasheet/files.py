"""Spec files: a JSON file told apart from a calibration profile by content, its records
checked and converted, the fallbacks each used said in one warning."""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..catalog import DeviceSpec, _stacklevel_of_caller
from .convert import spec_from_datasheet
from .fields import _SPEC_MARKERS, SpecError, SpecFallbackWarning

# The format marker of a calibration profile (predict/profile.py writes it): the content that
# tells a profile from a spec file; and the version of the profile layout this package reads.
PROFILE_FORMAT = "torch_gemm_cost.profile"
PROFILE_VERSION = 1


def document_kind(doc: Any) -> str:
    """``"profile"`` (a calibration profile), ``"spec"`` (a spec record or a list of them) or
    ``"catalog_record"`` (a DeviceSpec in the catalog's SI layout), by content; else
    ``"unknown"``."""
    if isinstance(doc, list):
        return "spec"
    if not isinstance(doc, Mapping):
        return "unknown"
    if "format" in doc or "predictor" in doc:
        return "profile"
    if "dram_bw_bytes_per_s" in doc or "peak_flops_per_s" in doc:
        return "catalog_record"
    if any(key in doc for key in _SPEC_MARKERS):
        return "spec"
    return "unknown"


def _read_json(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FileNotFoundError(f"device file {str(path)!r} does not exist (a spec file or a "
                                "calibration profile)") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"device file {str(path)!r} cannot be read: {e}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"device file {str(path)!r} is not valid JSON: {e}") from None


def _not_a_device(path: Path, kind: str) -> ValueError:
    if kind == "catalog_record":
        return ValueError(
            f"{str(path)!r} is a device in the catalog's SI layout (`devices --json`); a spec "
            "file uses the datasheet's fields and units: `torch-gemm-cost devices --template "
            "--like ID` prints one")
    return ValueError(
        f"{str(path)!r} is neither a spec file (a gpus.json record, or a list of them, with "
        f"fields such as {', '.join(_SPEC_MARKERS[:3])}) nor a calibration profile "
        f"(\"format\": \"{PROFILE_FORMAT}\"): `torch-gemm-cost devices --template` prints a "
        "spec record to fill in")


def _specs(doc: Any, path: Path, warn: bool) -> list[DeviceSpec]:
    """The devices of a parsed spec file (see ``load_spec_file``)."""
    records = doc if isinstance(doc, list) else [doc]
    if not records:
        raise SpecError(f"spec file {str(path)!r} holds an empty list")
    specs: list[DeviceSpec] = []
    for i, rec in enumerate(records):
        label = rec.get("id") if isinstance(rec, Mapping) else None
        where = (f"spec file {str(path)!r}"
                 + (f", record {label!r}" if isinstance(label, str) else
                    f", record {i}" if len(records) > 1 else ""))
        spec, fallbacks = spec_from_datasheet(rec, where)
        if warn and fallbacks:
            warnings.warn(
                f"{where}: {len(fallbacks)} optional fact{'s' if len(fallbacks) > 1 else ''} "
                f"not given, fallen back: " + "; ".join(fallbacks),
                SpecFallbackWarning, stacklevel=_stacklevel_of_caller())
        specs.append(spec)
    ids = [s.id for s in specs]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise SpecError(f"spec file {str(path)!r}: id {dup[0]!r} names more than one record")
    return specs


def load_spec_file(path: str | os.PathLike[str], *, warn: bool = True) -> list[DeviceSpec]:
    """Every device of a spec file: one record of gpus.json's schema, or a list of them.

    Each record is checked (a SpecError lists every problem, naming the file and record) and
    converted by ``catalog_record``; the specs carry ``origin="spec_file"``. One
    ``SpecFallbackWarning`` per record lists the optional facts it left out and what stands in.
    A calibration profile, or any other JSON, raises a ValueError saying what it is.
    """
    path = Path(path)
    doc = _read_json(path)
    kind = document_kind(doc)
    if kind == "profile":
        raise ValueError(f"{str(path)!r} is a calibration profile, not a spec file")
    if kind != "spec":
        raise _not_a_device(path, kind)
    return _specs(doc, path, warn)


def read_device_file(path: str | os.PathLike[str]) -> DeviceSpec | Mapping[str, Any]:
    """The device of a spec file, or the parsed document of a calibration profile.

    The two are told apart by content, never by name: a spec file (one gpus.json record) is
    read here into its spec; a calibration profile (written by ``torch-gemm-cost calibrate``)
    is returned as its document, for the predict stage to load its predictor
    (``predict/target.resolve_target``). A spec file of several devices, or any other JSON,
    raises a ValueError saying what it holds.
    """
    path = Path(path)
    doc = _read_json(path)
    kind = document_kind(doc)
    if kind == "profile":
        return doc
    if kind != "spec":
        raise _not_a_device(path, kind)
    specs = _specs(doc, path, warn=True)
    if len(specs) > 1:
        raise ValueError(
            f"spec file {str(path)!r} holds {len(specs)} devices "
            f"({', '.join(s.id for s in specs)}); a device is one of them: "
            "torch_gemm_cost.load_spec_file(path)[i], or predict-csv --device-spec for all")
    return specs[0]
