"""The package reads as its pipeline: no import circle, and no import from a later stage into an
earlier one. Imports are read with ``ast``, so those inside functions and under
``TYPE_CHECKING`` count as much as those at the top of a module."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "torch_gemm_cost"
PKG = PACKAGE.name

# The pipeline, in order: a module may import from its own stage and the stages before it.
# A module's stage is named by its first component under the package.
STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("foundation", ("suggest", "hardware")),
    ("capture", ("capture",)),
    ("records", ("records",)),
    ("compiled", ("compiled",)),
    ("predict", ("predict",)),
    # measured rows: read into the records predict takes, priced by the predictors
    ("measured", ("measured",)),
    ("advise", ("advise",)),
    # llm: serving plans, priced by the predict stage, their records holding CostReports, their
    # text rendered in llm.text; trainplan: training plans over many GPUs, priced the same way,
    # reading configs as llm does, their text in trainplan.text; no stage before imports them
    ("report", ("report", "llm", "trainplan")),
    # serving: simulations under load, each step priced by llm's pipeline; sweep: many runs of
    # the commands (estimate in api, plan_llm), so it sits with them at the top
    ("serving", ("serving",)),
    ("top", ("api", "calibrate", "cli", "sweep", "train", "__main__", "")),
)
STAGE_OF = {name: i for i, (_, names) in enumerate(STAGES) for name in names}


def modules(root: Path = PACKAGE) -> dict[str, Path]:
    """Dotted module name -> file, packages by their ``__init__``."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = (root.name, *path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (a package's import reaches its ``__init__``
    too, unless the importer lives inside that package)."""
    mods = modules(root)
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m, path in mods.items():
        here = m.split(".") if path.name == "__init__.py" else m.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(here[: len(here) - node.level + 1] + ([base] if base else []))
                targets = [base] + [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            for t in targets:
                while t and t not in mods:
                    t = t.rpartition(".")[0]
                while t and t != root.name:
                    if t != m and not m.startswith(t + "."):
                        edges[m].add(t)
                    t = t.rpartition(".")[0]
    return edges


def stage(module: str) -> int:
    first = module.split(".")[1] if "." in module else ""
    assert first in STAGE_OF, f"{module} belongs to no stage; add it to STAGES"
    return STAGE_OF[first]


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """One circle through each module that reaches itself (depth-first search)."""
    found = []
    for start in sorted(edges):
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for nxt in sorted(edges[node]):
                if nxt == start:
                    found.append(path + [start])
                    stack.clear()
                    break
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, path + [nxt]))
    return found


def test_every_module_has_a_stage() -> None:
    for m in modules():
        stage(m)


def test_no_import_circle() -> None:
    found = circles(import_graph())
    assert not found, "import circles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_no_import_from_a_later_stage() -> None:
    edges = import_graph()
    back = sorted(f"{m} ({STAGES[stage(m)][0]}) imports {t} ({STAGES[stage(t)][0]})"
                  for m, targets in edges.items() for t in targets if stage(t) > stage(m))
    assert not back, "imports back up the pipeline:\n" + "\n".join(back)


def test_the_graph_sees_imports_inside_functions(tmp_path: Path) -> None:
    """A circle closed by an import inside a function is found, as a top-level one is."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from .b import g\n")
    (pkg / "a.py").write_text("def f():\n    from .sub import b\n    return b\n")
    (pkg / "sub" / "b.py").write_text("from ..a import f\n\ndef g():\n    return f\n")
    edges = import_graph(pkg)
    assert edges == {"pkg": set(), "pkg.a": {"pkg.sub", "pkg.sub.b"}, "pkg.sub": {"pkg.sub.b"},
                     "pkg.sub.b": {"pkg.a"}}
    assert circles(edges) == [["pkg.a", "pkg.sub.b", "pkg.a"],
                              ["pkg.sub", "pkg.sub.b", "pkg.a", "pkg.sub"],
                              ["pkg.sub.b", "pkg.a", "pkg.sub.b"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_estimate_walks_the_pipeline_forward() -> None:
    """A traced walk of estimate() and print(report) (``sys.setprofile``, every call into the
    package): the calls that the user's code and api.py make enter the stages in pipeline
    order, no function calls into a stage after its own, and rendering predicts nothing."""
    import sys

    import torch

    transformers = pytest.importorskip("transformers")
    import torch_gemm_cost as tgc

    with torch.device("meta"):
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_embd=64,
                                                                     n_head=2))
    ids = torch.ones(2, 31, dtype=torch.long, device="meta")
    calls: list[tuple[str | None, str, str]] = []  # (caller's module in the package, callee's)

    def in_package(name: str) -> bool:
        return name == PKG or name.startswith(PKG + ".")

    def record(frame: Any, event: str, arg: Any) -> None:
        callee = frame.f_globals.get("__name__", "")
        if event != "call" or not in_package(callee):
            return
        up = frame.f_back
        while up is not None and not in_package(up.f_globals.get("__name__", "")):
            up = up.f_back
        calls.append((up.f_globals["__name__"] if up else None, callee, frame.f_code.co_name))

    sys.setprofile(record)
    try:
        report = tgc.estimate(model, (ids,), device="a100_sxm4_80gb", dtype="fp16")
        rendered_from = len(calls)
        str(report), report.explain(0), report.to_dict()
    finally:
        sys.setprofile(None)
    entered = [STAGES[stage(callee)][0] for caller, callee, _ in calls
               if caller in (None, f"{PKG}.api")]
    walk = [s for s in entered if s not in ("foundation", "top")]  # helpers, the orchestrator
    assert [s for i, s in enumerate(walk) if i == 0 or s != walk[i - 1]] == [
        "capture", "records", "predict", "advise", "report"]
    up = {(caller, f"{callee}.{name}") for caller, callee, name in calls
          if caller is not None and stage(callee) > stage(caller)}
    assert not up, f"calls into a later stage: {sorted(up)}"
    assert not [name for _, callee, name in calls[rendered_from:]
                if name == "predict" and callee.startswith(f"{PKG}.predict")]
