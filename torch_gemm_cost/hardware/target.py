"""Which device a prediction is for: the one reading of every entry point's ``device`` argument.

``resolve_target`` turns what a user names into a ``Target``: the ``DeviceSpec`` every model
reads (its peaks, caches, links and node), where that record came from, and, for a calibration
profile, the predictor record it brings. ``estimate``, ``compare``, ``annotate``, ``plan_llm``,
``predict_gemm_ms``, ``explain``, ``predict_collective_ms`` and ``predict-csv`` all resolve
through it, so a name, a spec file or a profile means the same device everywhere.

The target is resolved at the boundary, before anything is traced, so it belongs to the
foundation. A profile's predictor is a ``CalibratedPredictor`` or a ``HybridPredictor``, objects
of the predict stage: the target keeps the profile's document, and the predict stage builds its
predictor when it prices (``predict.profile.profile_predictor``).

    >>> resolve_target("Tesla T4").spec.id
    'tesla_t4'
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .catalog import DeviceLike, DeviceSpec, get_device, spec_from_record
from .datasheet import PROFILE_FORMAT, PROFILE_VERSION, read_device_file

__all__ = ["Target", "profile_spec", "resolve_target"]


@dataclass(frozen=True)
class Target:
    """A resolved device argument."""

    spec: DeviceSpec
    # "catalog", "detected" (a local GPU the catalog lacks), "DeviceSpec given",
    # "spec file <path>" or "profile <path>"
    source: str
    # a calibration profile's document, whose "predictor" record the predict stage builds
    # (``predict.profile.profile_predictor``); None for every other device
    profile: Mapping[str, Any] | None = field(default=None, repr=False, compare=False)


def resolve_target(device: DeviceLike) -> Target:
    """The device ``device`` names.

    ``device`` is a catalog id (``"h100_sxm5_80gb"``), a driver name as
    ``torch.cuda.get_device_name()`` returns it (``"Tesla T4"``), ``"cuda"``/``"cuda:N"`` (the
    local GPU), a ``DeviceSpec``, or the path of a JSON file: a spec file (a datasheet record in
    gpus.json's schema: ``torch-gemm-cost devices --template``) or a calibration profile written
    by ``torch-gemm-cost calibrate``. The file's content says which, never its name. An unknown
    name that is no file either raises the catalog's ValueError, which lists the close matches.
    """
    if isinstance(device, DeviceSpec):
        return Target(device, "DeviceSpec given")
    if not isinstance(device, (str, os.PathLike)):
        raise TypeError(f"device must be a catalog id, a driver name, a DeviceSpec, a spec file "
                        f"or a calibration profile path, got {device!r}")
    if isinstance(device, str) and not device.endswith(".json"):
        try:
            spec = get_device(device)
        except ValueError:
            if not Path(device).is_file():  # no file either: the catalog's error
                raise
        else:
            return Target(spec, spec.origin)  # "catalog", or "detected" for "cuda"
    path = Path(device)
    found = read_device_file(path)
    if isinstance(found, DeviceSpec):
        return Target(found, f"spec file {path}")
    return Target(profile_spec(found, path), f"profile {path}", found)


def profile_spec(doc: Any, path: str | os.PathLike[str]) -> DeviceSpec:
    """The device of a parsed calibration profile read from ``path``, its format, version and
    device record checked; a ValueError names the file and the bad entry."""
    try:
        if not isinstance(doc, Mapping) or doc.get("format") != PROFILE_FORMAT:
            got = doc.get("format") if isinstance(doc, Mapping) else type(doc).__name__
            raise ValueError(f"format is {got!r}, expected {PROFILE_FORMAT!r}")
        if doc.get("version") != PROFILE_VERSION:
            raise ValueError(f"version is {doc.get('version')!r}, this reader knows "
                             f"{PROFILE_VERSION}")
        for key in ("device", "predictor"):
            if key not in doc:
                raise ValueError(f"missing {key!r}")
        return spec_from_record(doc["device"])
    except (TypeError, ValueError) as e:
        raise ValueError(f"calibration profile {str(path)!r} is invalid: {e}") from None
