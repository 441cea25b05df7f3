"""KernelBench's programs (DATA.md, ``kernelbench/problems/<set>_<tree>/level{1,2,3}/*.py``), built
as a user builds them to estimate: each defines ``Model(nn.Module)``, ``get_init_inputs()`` and
``get_inputs()``.

``build`` runs the program's own code with the meta device as the default, so no weight or
input is allocated; a program that names CUDA (``device="cuda"``, ``.cuda()``) gets the meta
device instead, as the host has no GPU. A constructor that reads values (Swin's
``torch.linspace(...).item()`` drop-path rates) cannot run on meta: the program is then built
for real on the CPU, weights and inputs, within ``real_bytes_limit`` bytes (``capture.real``).
"""

from __future__ import annotations

import importlib.util
import re
import sys
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from ..capture.real import DEFAULT_REAL_BYTES_LIMIT, AllocationBudget, check_real_bytes_limit

__all__ = ["LEVELS", "MODE", "BuiltProgram", "KernelBenchProgram", "build", "programs"]

LEVELS: tuple[int, ...] = (1, 2, 3)
# the estimate mode of the run KernelBench times: its timing script (ScalingIntelligence/
# KernelBench, scripts/generate_baseline_time.py) builds Model(*init_inputs) and times
# model(*inputs) under torch.no_grad() without calling .eval(), so every module keeps
# nn.Module's default training=True: one forward without autograd, the flags as built
MODE = "forward"
_FILE = re.compile(r"^(\d+)_.*\.py$")


@dataclass(frozen=True)
class KernelBenchProgram:
    """One program file: its ``level`` (1-3), its number in the level and its file name, as
    the timings' ``problem`` column names it."""

    level: int
    number: int
    name: str
    path: Path


def programs(tree: str | Path, levels: tuple[int, ...] = LEVELS) -> list[KernelBenchProgram]:
    """The programs of one problem tree (``.../problems/v0_0228e57``), by level and number; a
    ValueError when the tree holds no ``level<N>`` folder."""
    root = Path(tree)
    found = []
    for level in levels:
        for path in (root / f"level{level}").glob("*.py"):
            m = _FILE.match(path.name)
            if m:
                found.append(KernelBenchProgram(level, int(m.group(1)), path.name, path))
    if not found:
        raise ValueError(f"no KernelBench programs under {root} (expected level1/ ... level3/ "
                         "holding <N>_<name>.py files)")
    return sorted(found, key=lambda p: (p.level, p.number))


@dataclass(frozen=True)
class BuiltProgram:
    """A program's model and inputs, and where they live: ``"meta"``, or ``"cpu"`` where the
    constructor reads values (``meta_error`` says what stopped the meta build)."""

    program: KernelBenchProgram
    model: torch.nn.Module
    inputs: tuple[Any, ...]
    device: str
    meta_error: str = ""


def _is_cuda(x: Any) -> bool:
    if isinstance(x, str):
        return x.startswith("cuda")
    return isinstance(x, torch.device) and x.type == "cuda"


class _OnDevice(TorchFunctionMode):
    """Tensors a program makes on CUDA (``device="cuda"``, ``.cuda()``, ``.to("cuda")``) go to
    ``device`` instead."""

    def __init__(self, device: str) -> None:
        super().__init__()
        self.device = torch.device(device)

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[override]
        kwargs = dict(kwargs or {})
        if func is torch.Tensor.cuda:
            return args[0].to(self.device)
        if _is_cuda(kwargs.get("device")):
            kwargs["device"] = self.device
        if func is torch.Tensor.to:
            args = tuple(self.device if _is_cuda(a) else a for a in args)
        return func(*args, **kwargs)


def _load(program: KernelBenchProgram) -> ModuleType:
    name = f"kernelbench_{program.path.parent.parent.name}_l{program.level}_{program.number}"
    name = re.sub(r"\W", "_", name)
    spec = importlib.util.spec_from_file_location(name, program.path)
    if spec is None or spec.loader is None:
        raise ValueError(f"cannot load {program.path} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look their module up
    spec.loader.exec_module(module)
    return module


def _run(module: ModuleType, device: str, budget: AllocationBudget | None
         ) -> tuple[torch.nn.Module, tuple[Any, ...]]:
    with ExitStack() as stack:
        if budget is not None:
            stack.enter_context(budget)
        stack.enter_context(torch.device(device))
        stack.enter_context(_OnDevice(device))
        model = module.Model(*module.get_init_inputs())
        inputs = tuple(module.get_inputs())
    return model, inputs


def build(program: KernelBenchProgram, *,
          real_bytes_limit: int = DEFAULT_REAL_BYTES_LIMIT) -> BuiltProgram:
    """``program``'s model and inputs on the meta device, else (a constructor that reads
    values) for real on the CPU within ``real_bytes_limit`` bytes; the model left in training
    mode, as KernelBench timed it. Raises what the program raised, or ``RealBytesLimitError``."""
    check_real_bytes_limit(real_bytes_limit)
    module = _load(program)
    try:
        model, inputs = _run(module, "meta", None)
        return BuiltProgram(program, model, inputs, "meta")
    except (RuntimeError, NotImplementedError) as e:  # a value read off a meta tensor
        meta_error = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e) else ''}"
    model, inputs = _run(module, "cpu", AllocationBudget(real_bytes_limit))
    return BuiltProgram(program, model, inputs, "cpu", meta_error)
