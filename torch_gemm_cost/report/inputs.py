"""The question a report answers: which model, on which inputs, in which dtype and mode, on
which device (and where its facts came from), priced by which predictor.

``estimate()`` and ``compare()`` fill a ``ReportInputs`` from their arguments (the sizes read
off the input tensors); the command line adds what only it knows (the task it built, the sizes
it was asked for). Every rendering states it: the text footer's first line, ``to_dict()
["inputs"]``, the CSV's leading columns and the page's heading.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["ReportInputs", "device_origin", "inputs_line", "tensor_inputs"]


@dataclass(frozen=True)
class ReportInputs:
    """What was asked. Sizes are None where they are not known: ``batch`` is the leading dim
    of the first input tensor, ``seq`` the last dim of the first 2-D integer input (token ids),
    ``image_size`` the side of the first square 4-D floating input (pixels; for a diffusion
    model's latents the command line gives the image's side), unless the command line says."""

    model: str  # class name of the estimated model
    dtype: str  # compute dtype of the GEMMs
    mode: str  # "inference", "train" or "forward" (api.MODES)
    device: str  # catalog id
    device_name: str
    # "catalog", "spec file", "profile", "detected" (the local GPU or CPU) or "given" (a
    # DeviceSpec handed to the API); ``device_file`` names the spec file or profile
    device_origin: str
    predictor: str
    predictor_version: str
    device_file: str | None = None
    task: str | None = None  # the command line's --task, as it built it
    batch: int | None = None
    seq: int | None = None
    image_size: int | None = None  # pixels per side
    attention: str | None = None  # the model's attention implementation ("sdpa", "eager")
    compiled: bool = False  # priced as torch.compile (inductor) runs it
    # what the total measures: "event", "kernel" or "graph"; None in a report built by hand
    timing: str | None = None
    optimizer: str | None = None  # the optimizer whose step a training report includes
    tensors: tuple[str, ...] = ()  # each input tensor: "input_ids 8×1024 int64"


def device_origin(source: str) -> tuple[str, str | None]:
    """(origin, file) of a resolved device's ``Target.source``: ``"spec file <path>"`` ->
    ``("spec file", path)``, ``"DeviceSpec given"`` -> ``("given", None)``."""
    for kind in ("spec file", "profile"):
        if source.startswith(kind + " "):
            return kind, source[len(kind) + 1:]
    return ("given", None) if source == "DeviceSpec given" else (source, None)


def tensor_inputs(args: Any, kwargs: Mapping[str, Any] | None) -> dict[str, Any]:
    """The input tensors of ``model(*args, **kwargs)`` described (``tensors``), and the sizes
    read off them (``batch``, ``seq``, ``image_size``; see ``ReportInputs``)."""
    named: list[tuple[str, torch.Tensor]] = []
    positional = args if isinstance(args, (tuple, list)) else (args,)
    for i, a in enumerate(positional):
        if isinstance(a, torch.Tensor):
            named.append((f"arg{i}", a))
    for k, v in (kwargs or {}).items():
        if isinstance(v, torch.Tensor):
            named.append((k, v))
    shaped = [(n, t) for n, t in named if t.dim() >= 1]
    ids = [t for _, t in shaped if t.dim() == 2 and not t.dtype.is_floating_point
           and t.dtype != torch.bool]
    images = [t for _, t in shaped if t.dim() == 4 and t.dtype.is_floating_point
              and t.shape[-1] == t.shape[-2]]
    return {
        "tensors": tuple(f"{n} {'×'.join(map(str, t.shape))} {str(t.dtype).removeprefix('torch.')}"
                         for n, t in named),
        "batch": int(shaped[0][1].shape[0]) if shaped else None,
        "seq": int(ids[0].shape[1]) if ids else None,
        "image_size": int(images[0].shape[-1]) if images else None,
    }


_ORIGIN_TEXT = {"catalog": "from the catalog", "detected": "detected on this host",
                "given": "a DeviceSpec given"}


def inputs_line(inputs: ReportInputs, omit: tuple[str, ...] = ()) -> str:
    """The question in one line: model, task, sizes, dtype, mode, attention, device and its
    origin, predictor; less the ``dtype``, ``device`` or ``predictor`` named in ``omit`` (a
    comparison's columns)."""
    parts = [inputs.model]
    parts += [f"{label} {value}" for label, value in (
        ("task", inputs.task), ("batch", inputs.batch), ("seq", inputs.seq),
        ("image", None if inputs.image_size is None else
         f"{inputs.image_size}×{inputs.image_size}"),
    ) if value is not None]
    parts += [v for k, v in (("dtype", inputs.dtype), ("mode", inputs.mode)) if k not in omit]
    if inputs.optimizer:
        parts.append(f"optimizer {inputs.optimizer}")
    if inputs.attention:
        parts.append(f"attention {inputs.attention}")
    if inputs.compiled:
        parts.append("torch.compile")
    if inputs.timing:
        parts.append(f"{inputs.timing} timing")
    origin = _ORIGIN_TEXT.get(inputs.device_origin, f"from {inputs.device_origin}")
    if inputs.device_file:
        origin += f" {inputs.device_file}"
    if "device" not in omit:
        parts.append(f"device {inputs.device} ({origin})")
    if "predictor" not in omit:
        parts.append(f"predictor {inputs.predictor} v{inputs.predictor_version}")
    return "inputs: " + ", ".join(parts)
