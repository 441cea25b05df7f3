"""The accuracy page and the README's accuracy table, written from the committed results.

    python benchmarks/accuracy_page.py           # rewrite docs/accuracy.md and README.md's table
    python benchmarks/accuracy_page.py --check   # exit 1, naming the file, if either is stale

Every figure comes from a file in ``benchmarks/results``: the JSON a benchmark writes where it
writes one (``accuracy*.json``), otherwise the markdown tables of its ``.md``, read by heading,
row and column, or copied verbatim with the benchmark's command line and the table's heading.
Nothing here is a measurement: rerun the benchmark, then this script. A table or cell that is
not where this script looks for it stops the script with its file, heading and key.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
PAGE = ROOT / "docs" / "accuracy.md"
README = ROOT / "README.md"
BEGIN = "<!-- accuracy:begin (written by benchmarks/accuracy_page.py; do not edit) -->"
END = "<!-- accuracy:end -->"

COMMAND = re.compile(r"`(python [^`]+)`")
SIMPLE_RULE = re.compile(r"^-+( +-+)+$")
CPU_SUMMARY = re.compile(
    r"(\d+) held-out fp32 shapes: MAPE ([\d.]+)% \(profile\) against ([\d.]+)%")

GPU_NAMES = {
    "a100_pcie_40gb": "A100 PCIe 40GB", "a100_pcie_80gb": "A100 PCIe 80GB",
    "a100_sxm4_80gb": "A100 SXM4 80GB", "a40": "A40", "b200": "B200",
    "h200_sxm_141gb": "H200", "l40s": "L40S", "mi210": "MI210", "mi300x": "MI300X",
    "tesla_p100_pcie_16gb": "P100", "tesla_p4": "P4", "tesla_t4": "T4",
    "tesla_v100_pcie_32gb": "V100 PCIe", "tesla_v100_sxm2": "V100 SXM2", "rtx_3090": "RTX 3090",
    "rtx_a6000": "RTX A6000", "a10": "A10", "a10g": "A10G", "a100_sxm4_40gb": "A100 SXM4 40GB",
}


@dataclass(frozen=True)
class Table:
    """One table of a results file, its lines as written and its cells by column name."""

    heading: str
    lines: tuple[str, ...]
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]

    def column(self, name: str) -> int:
        if name not in self.columns:
            raise KeyError(f"table under {self.heading!r} has no column {name!r}; "
                           f"it has {list(self.columns)}")
        return self.columns.index(name)

    def row(self, **where: str) -> dict[str, str]:
        """The one row whose named columns hold these values (spaces in names as ``_``)."""
        found = [r for r in self.rows
                 if all(r[self.column(k.replace("_", " "))] == v for k, v in where.items())]
        if len(found) != 1:
            raise KeyError(f"table under {self.heading!r}: {len(found)} rows match {where}")
        return dict(zip(self.columns, found[0], strict=True))

    def records(self) -> list[dict[str, str]]:
        return [dict(zip(self.columns, r, strict=True)) for r in self.rows]


@dataclass(frozen=True)
class ResultsFile:
    """A benchmark's markdown results: its title, the command that wrote it, its tables."""

    path: Path
    title: str
    command: str
    tables: tuple[Table, ...]

    @property
    def script(self) -> str:
        return self.command.split()[1]

    def table(self, heading: str, index: int = 0) -> Table:
        """The ``index``-th table under the section whose heading starts with ``heading``."""
        found = [t for t in self.tables if t.heading.startswith(heading)]
        if len(found) <= index:
            raise KeyError(f"{self.path.name}: no table {index} under a heading starting "
                           f"{heading!r}; headings: {sorted({t.heading for t in self.tables})}")
        return found[index]

    def under(self, headings: Sequence[str] | None) -> list[Table]:
        """The tables under these headings (prefixes), in the file's order; None: all."""
        if headings is None:
            return list(self.tables)
        for h in headings:
            self.table(h)  # each named section exists
        return [t for t in self.tables if any(t.heading.startswith(h) for h in headings)]


def _pipe_cells(line: str) -> tuple[str, ...]:
    return tuple(c.strip() for c in line.strip().strip("|").split("|"))


def _table(heading: str, lines: list[str]) -> Table:
    if lines[0].startswith("|"):
        columns = _pipe_cells(lines[0])
        rows = tuple(_pipe_cells(ln) for ln in lines[2:])
    else:  # tabulate's "simple" format: a header, a rule of dashes, the rows
        spans = [m.span() for m in re.finditer(r"-+", lines[1])]
        starts = [s for s, _ in spans] + [None]

        def cut(line: str) -> tuple[str, ...]:
            return tuple(line[a:b].strip() for a, b in itertools.pairwise(starts))

        columns = cut(lines[0])
        rows = tuple(cut(ln) for ln in lines[2:])
    return Table(heading, tuple(lines), columns, rows)


def read_results(path: Path) -> ResultsFile:
    """Parse one ``benchmarks/results/*.md``: title, command line and every table."""
    lines = path.read_text().splitlines()
    title = lines[0].removeprefix("# ").strip()
    command = next((m.group(1) for ln in lines[1:6] if (m := COMMAND.search(ln))), None)
    if command is None:
        raise ValueError(f"{path}: no `python benchmarks/...` command in its first lines")
    heading, tables, i = "", [], 1
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        starts_pipe = line.startswith("|") and i + 1 < len(lines) and lines[i + 1].startswith("|-")
        starts_simple = (line.strip() and i + 1 < len(lines)
                         and SIMPLE_RULE.match(lines[i + 1].rstrip()) is not None)
        if starts_pipe or starts_simple:
            j = i + 2
            while j < len(lines) and lines[j].strip() and not lines[j].startswith("#"):
                j += 1
            tables.append(_table(heading, lines[i:j]))
            i = j
            continue
        i += 1
    return ResultsFile(path, title, command, tuple(tables))


def pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def cell_pct(text: str) -> str:
    """A table's percentage as ``12.3%`` whether the cell says ``12.3`` or ``12.3%``."""
    return text if text.endswith("%") else f"{float(text):.1f}%"


def num(text: str) -> float:
    return float(text.rstrip("%"))


def link(path: Path) -> str:
    return f"[{path.name}]({path.relative_to(ROOT).as_posix()})"


@dataclass(frozen=True)
class Row:
    """One line of the accuracy table: what was scored, where, and by which command."""

    what: str
    gpus: str
    chip_in_fit: str
    ours: str
    beside: str
    source: Path
    command: str

    def cells(self, docs_relative: bool) -> list[str]:
        base = "../" if docs_relative else ""
        script = self.command.split()[1]
        produced = (f"[`{Path(script).name}`]({base}{script}) → "
                    f"[{self.source.name}]({base}{self.source.relative_to(ROOT).as_posix()})")
        return [self.what, self.gpus, self.chip_in_fit, self.ours, self.beside, produced]


class Results:
    """The committed results, read once each."""

    def __init__(self, results: Path) -> None:
        self.dir = results
        self._md: dict[str, ResultsFile] = {}
        self._json: dict[str, dict[str, Any]] = {}

    def md(self, name: str) -> ResultsFile:
        if name not in self._md:
            self._md[name] = read_results(self.dir / f"{name}.md")
        return self._md[name]

    def json(self, name: str) -> dict[str, Any]:
        if name not in self._json:
            self._json[name] = json.loads((self.dir / f"{name}.json").read_text())
        return self._json[name]

    def json_command(self, name: str) -> str:
        found = COMMAND.search(self.json(name)["command"])
        if found is None:
            raise ValueError(f"{name}.json: no command in {self.json(name)['command']!r}")
        return found.group(1)


def gemm_rows(r: Results) -> list[Row]:
    acc = r.json("accuracy")
    hyb, roof = acc["predictors"]["hybrid"], acc["predictors"]["roofline"]
    per_gpu, roof_gpu = hyb["loco_mape_per_gpu"], roof["loco_mape_per_gpu"]
    ratios = r.md("accuracy").table("(a)")
    src, cmd = r.dir / "accuracy.json", r.json_command("accuracy")
    best = min(per_gpu, key=per_gpu.__getitem__)
    worst = max(per_gpu, key=per_gpu.__getitem__)
    worst_ratio = ratios.row(gpu=worst)["hybrid median pred/meas"]
    rows = [
        Row(f"GEMMs, mean over {len(per_gpu)} GPUs (each counts once)", "every GPU, in turn",
            "no", pct(hyb["loco_mape_overall"]), f"roofline {pct(roof['loco_mape_overall'])}",
            src, cmd),
        Row("GEMMs, best GPU", GPU_NAMES[best], "no", pct(per_gpu[best]),
            f"roofline {pct(roof_gpu[best])}", src, cmd),
        Row(f"GEMMs, worst GPU (median predicted/measured {worst_ratio})", GPU_NAMES[worst], "no",
            pct(per_gpu[worst]), f"roofline {pct(roof_gpu[worst])}", src, cmd),
    ]
    aic, aic_roof = hyb["aiconfigurator_ge_0.01ms_mape"], roof["aiconfigurator_ge_0.01ms_mape"]
    keys = sorted(k for k in aic if k.endswith(" bfloat16"))
    rows.append(Row(
        "vLLM's linear layers of 0.01 ms or more, bf16",
        " / ".join(GPU_NAMES[k.split()[0]] for k in keys), "no",
        " / ".join(pct(aic[k]) for k in keys),
        "roofline " + " / ".join(pct(aic_roof[k]) for k in keys), src, cmd))
    cli = r.md("fp8_heldout_cli")
    fp8_rows = cli.table("").records()
    rows.append(Row(
        "the same, fp8, priced by `predict-csv` with held-out weights",
        " / ".join(GPU_NAMES[x["gpu"]] for x in fp8_rows), "no",
        " / ".join(cell_pct(x["hybrid MAPE (predict-csv)"]) for x in fp8_rows),
        "roofline " + " / ".join(cell_pct(x["roofline MAPE"]) for x in fp8_rows),
        cli.path, cli.command))
    fp8 = r.md("fp8_dispatch")
    in_fit = fp8.table("What knowing").row(predictor="in-sample")["MAPE"]
    rows.append(Row("the same, fp8, with its chip in the fit", "L40S", "yes", in_fit, "",
                    fp8.path, fp8.command))
    gf = r.md("geforce_boost")
    gf_table = gf.table("RTX 3090, rows under")
    roof = f"roofline {gf_table.row(predictor='roofline (datasheet peak)')['MAPE']}"
    held = gf_table.row(predictor="GA102 fold, GeForce terms")
    rows.append(Row(
        f"GEMMs of a GeForce board, never fitted, held out by chip (median predicted/measured "
        f"{held['median pred/meas']})", "RTX 3090", "no", held["MAPE"], roof,
        gf.path, gf.command))
    ours = gf_table.row(predictor="shipped, GeForce terms")
    rows.append(Row(
        f"the same, shipped weights (median predicted/measured {ours['median pred/meas']})",
        "RTX 3090", "yes (the A40, a datacenter board of its chip)", ours["MAPE"], roof,
        gf.path, gf.command))
    return rows


def whole_model_rows(r: Results) -> list[Row]:
    held, fit = r.md("e2e_heldout"), r.md("e2e")
    t, tf = held.table("MAPE per GPU"), fit.table("MAPE per GPU")
    rows = []
    for mode, label in (("inf", "inference"), ("train", "training steps")):
        a = t.row(gpu="all NeuSight labels", mode=mode)
        gpus = {x["gpu"] for x in t.records()
                if x["mode"] == mode and x["gpu"] in GPU_NAMES and x["NeuSight MAPE% (same rows)"]
                != "nan"}
        rows.append(Row(f"whole models, {label}, {a['rows']} NeuSight runs on {len(gpus)} GPUs",
                        "each GPU, in turn", "no", cell_pct(a["ours MAPE%"]),
                        f"NeuSight {cell_pct(a['NeuSight MAPE% (same rows)'])}",
                        held.path, held.command))
    own = [x for x in t.records() if x["gpu"] in GPU_NAMES and x["NeuSight MAPE% (same rows)"]
           != "nan"]
    worst = max(own, key=lambda x: num(x["ours MAPE%"]))
    mode = "inference" if worst["mode"] == "inf" else "training"
    rows.append(Row(f"whole models, worst GPU ({mode}, {worst['rows']} runs, mean signed "
                    f"error {worst['ours mean signed err%']}%)",
                    GPU_NAMES[worst["gpu"]], "no", cell_pct(worst["ours MAPE%"]),
                    f"NeuSight {cell_pct(worst['NeuSight MAPE% (same rows)'])}",
                    held.path, held.command))
    inf, train = (tf.row(gpu="all NeuSight labels", mode=m) for m in ("inf", "train"))
    rows.append(Row("the same NeuSight runs, inference / training", "every GPU", "yes",
                    f"{cell_pct(inf['ours MAPE%'])} / {cell_pct(train['ours MAPE%'])}",
                    f"NeuSight {cell_pct(inf['NeuSight MAPE% (same rows)'])} / "
                    f"{cell_pct(train['NeuSight MAPE% (same rows)'])}", fit.path, fit.command))
    h200 = r.md("h200")
    w = h200.table("Whole models")
    for pred, in_fit in (("H200 held out", "no"), ("H200 in the fit", "yes")):
        i, tr = w.row(predictor=pred, mode="inf"), w.row(predictor=pred, mode="train")
        runs = int(i["rows"]) + int(tr["rows"])
        rows.append(Row(f"whole models in fp32, inference / training, {runs} runs", "H200", in_fit,
                        f"{cell_pct(i['MAPE%'])} / {cell_pct(tr['MAPE%'])}", "", h200.path,
                        h200.command))
    fused = r.md("fused")
    f = fused.table("NeuSight's `fusion`")
    compiled, neusight = f.row(**{"MAPE over the 4 fusion rows": "ours, compiled"}), \
        f.row(**{"MAPE over the 4 fusion rows": "NeuSight, compiled"})
    rows.append(Row("`torch.compile`d whole models, 4 runs", "A100 PCIe 40GB", "no",
                    compiled["GA100 held out of the GEMM and op fits"],
                    f"NeuSight {neusight['A100 in the fit (shipped)']} (in its fit)",
                    fused.path, fused.command))
    return rows


def kernel_rows(r: Results) -> list[Row]:
    att = r.md("attention")
    s = att.table("Summary")
    gpus = sorted({x["gpu"] for x in s.records()})
    rows = []
    for phase in ("prefill", "decode"):
        cells = [s.row(gpu=g, phase=phase) for g in gpus]
        rows.append(Row(f"attention calls of 0.01 ms or more, {phase}",
                        " / ".join(GPU_NAMES[g] for g in gpus), "no",
                        " / ".join(c["held out"] for c in cells),
                        "roofline " + " / ".join(c["roofline"] for c in cells),
                        att.path, att.command))
    fused = r.md("fused")
    v = fused.table("vidur's fused")
    by_gpu: dict[str, list[dict[str, str]]] = {}
    for x in v.records():
        by_gpu.setdefault(x["gpu (held out)"], []).append(x)
    names = sorted(by_gpu)
    ops = len(by_gpu[names[0]])
    rows.append(Row(f"fused LLM-layer ops (vidur), mean of {ops} ops",
                    " / ".join(GPU_NAMES[g] for g in names), "no",
                    " / ".join(f"{statistics.mean(num(x['held MAPE']) for x in by_gpu[g]):.1f}%"
                               for g in names),
                    "roofline " + " / ".join(
                        f"{statistics.mean(num(x['roofline MAPE']) for x in by_gpu[g]):.1f}%"
                        for g in names), fused.path, fused.command))
    coll = r.md("collectives")
    c = coll.table("All-reduce")
    priced = [x for x in c.records() if x["held out MAPE"] != "-"]
    rows.append(Row("all-reduces of 64 KiB or more",
                    " / ".join(GPU_NAMES[x["gpu"]] for x in priced), "no",
                    " / ".join(x["held out MAPE"] for x in priced),
                    "bandwidth bound " + " / ".join(x["baseline MAPE"] for x in priced),
                    coll.path, coll.command))
    return rows


def kernelbench_rows(r: Results) -> list[Row]:
    """KernelBench's programs as users time them, eager: the scaled-up sizes (v0.1, GPU time
    dominates) and the original ones (v0, the host's issue time dominates), levels 1-3."""
    kb = r.md("kernelbench_accuracy")
    s = kb.table("By problem set, level and mode")
    rows = []
    for pset, label in (("v0.1", "scaled-up sizes"), ("v0", "original, host-bound sizes")):
        cells = [s.row(set=pset, level=str(level), mode="eager") for level in (1, 2, 3)]
        per_gpu = [x for x in kb.table("Per GPU").records() if x["set"] == pset
                   and x["mode"] == "eager"]
        gpus = sorted({x["gpu"] for x in per_gpu})
        gemm_in = sorted({GPU_NAMES.get(x["gpu"], x["gpu"]) for x in per_gpu
                          if x["GEMM fit"] == "yes"})
        ops_in = sorted({GPU_NAMES.get(x["gpu"], x["gpu"]) for x in per_gpu
                         if x["op fit"] == "yes"})
        parts = [f"GEMMs: yes on {', '.join(gemm_in)}" if gemm_in else "GEMMs no"]
        parts += [f"other ops: yes on {', '.join(ops_in)}"] if ops_in else []
        # one constant of the GPU side is fitted on these boards' timings of 82-85
        parts += ["host no", "a depthwise constant fitted on programs 82-85"]
        held = "; ".join(parts)
        rows.append(Row(
            f"KernelBench programs of 0.05 ms or more, {label}, eager, levels 1 / 2 / 3 "
            f"({' + '.join(c['rows'] for c in cells)} timings)",
            " / ".join(GPU_NAMES.get(g, g) for g in gpus) if len(gpus) <= 3
            else f"{len(gpus)} GPUs, each in turn", held,
            " / ".join(f"{c['MAPE %']}%" for c in cells),
            "roofline " + " / ".join(f"{c['roofline MAPE %']}%" for c in cells),
            kb.path, kb.command))
    return rows


def interval_rows(r: Results) -> list[Row]:
    iv = r.md("intervals")
    s = iv.table("Summary").row(level="80%")
    gi = r.md("intervals_gemm")
    g = gi.table("Summary").row(level="80%")
    return [
        Row("80% intervals: share of GEMMs inside (worst GPU), wider for GPUs unlike the fit",
            "every GPU, in turn", "no", f"{g['coverage (GPUs)']} ({g['worst GPU']})",
            f"median hi/lo {g['median hi/lo']}", gi.path, gi.command),
        Row("80% intervals: share of whole-model runs inside (worst GPU)", "every GPU, in turn",
            "no", f"{s['whole-model coverage (GPUs)']} ({s['whole-model worst GPU']})",
            f"median hi/lo {s['whole-model median hi/lo']}", iv.path, iv.command),
    ]


def cpu_rows(r: Results) -> list[Row]:
    cal = r.md("calibrate_cpu")
    text = cal.path.read_text()
    found = CPU_SUMMARY.search(text)
    if found is None:
        raise ValueError(f"{cal.path.name}: no line matching {CPU_SUMMARY.pattern!r}")
    shapes, ours, roof = found.groups()
    if int(shapes) != len(cal.tables[0].rows):
        raise ValueError(f"{cal.path.name}: {shapes} shapes in its summary, "
                         f"{len(cal.tables[0].rows)} in its table")
    return [Row(f"a CPU after a calibrate run, {shapes} fp32 shapes it never timed",
                "the CPU it ran on", "its own profile", f"{ours}%", f"roofline {roof}%",
                cal.path, cal.command)]


SECTIONS: tuple[Callable[[Results], list[Row]], ...] = (
    gemm_rows, whole_model_rows, kernel_rows, kernelbench_rows, interval_rows, cpu_rows)
HEADER = ("what", "GPU", "its chip in the fit?", "ours", "beside it", "produced by")


def summary_rows(r: Results) -> list[Row]:
    return [row for section in SECTIONS for row in section(r)]


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
    return out


def readme_block(r: Results) -> str:
    rows = [row.cells(docs_relative=False) for row in summary_rows(r)]
    return "\n".join([BEGIN, *markdown_table(HEADER, rows), END])


# results file -> the headings (prefixes) of the tables the page copies; None: every table
VERBATIM: tuple[tuple[str, tuple[str, ...] | None], ...] = (
    ("accuracy", ("Per (gpu, source, dtype)",)),
    ("e2e_heldout", ("MAPE per GPU",)),
    ("e2e", ("MAPE per GPU",)),
    ("h200", ("GEMMs", "Whole models")),
    ("attention", ("Summary", "Per (gpu, phase, KV dtype)")),
    ("fused", ("vidur's fused", "NeuSight's `fusion`")),
    ("collectives", ("All-reduce",)),
    ("intervals", ("Summary", "GEMMs per GPU", "Whole models per GPU")),
    ("intervals_gemm", ("Summary", "Per GPU")),
    ("spec_devices", None),
    ("fp8_heldout_cli", None),
    ("predict_csv_paths", None),
    ("fp8_dispatch", None),
    ("fp8_cast", None),
    ("weight_streaming", None),
    ("calibrate_cpu", None),
    ("sustained", None),
    ("geforce_boost", None),
    ("amd_gemm_clock", None),
    ("kernelbench_accuracy", ("By problem set, level and mode",)),
    ("label_consistency", None),
    ("ceiling", None),
    ("tile_match", None),
    ("llm", ("Must show", "Against published")),
)


def gemm_json_section(r: Results) -> list[str]:
    seeds = (("accuracy", "seed 0"), ("accuracy_seed1", "seed 1"),
             ("accuracy_seeds01", "seeds 0 and 1 averaged"))
    acc = r.json("accuracy")["predictors"]
    variants = list(acc)
    out = ["## GEMMs, each chip held out", "",
           f"From [accuracy.json](../benchmarks/results/accuracy.json), written by "
           f"`{r.json_command('accuracy')}`. Variants: " + ", ".join(f"`{v}`" for v in variants)
           + (" (`no_family` drops the per-library-family terms;" if "no_family" in variants
              else " (") + " the roofline has no fitted parameter).", "", "### MAPE per GPU", ""]
    gpus = list(acc["hybrid"]["loco_mape_per_gpu"])
    rows = [[GPU_NAMES[g], *(pct(acc[v]["loco_mape_per_gpu"][g]) for v in variants)]
            for g in gpus]
    rows.append(["mean over GPUs", *(pct(acc[v]["loco_mape_overall"]) for v in variants)])
    out += markdown_table(["GPU", *variants], rows)
    out += ["", "### vLLM's linear layers of 0.01 ms or more (aiconfigurator)", ""]
    keys = list(acc["hybrid"]["aiconfigurator_ge_0.01ms_mape"])
    out += markdown_table(["GPU, dtype", *variants], [
        [f"{GPU_NAMES[k.split()[0]]}, {k.split()[1]}",
         *(pct(acc[v]["aiconfigurator_ge_0.01ms_mape"][k]) for v in variants)] for k in keys])
    out += ["", "### vidur's fp16 projections", ""]
    vk = list(acc["hybrid"]["vidur_heldout_mape"])
    out += markdown_table(["GPU", *variants], [
        [GPU_NAMES.get(k, k), *(pct(acc[v]["vidur_heldout_mape"][k]) for v in variants)]
        for k in vk])
    out += ["", "### One seed against another (hybrid)", "",
            ("Each fit samples rows per group and starts the MLP from seeded weights; a change "
            "smaller than the seeds' spread has not been shown to matter."), ""]
    hybrids = [r.json(name)["predictors"]["hybrid"] for name, _ in seeds]
    out += markdown_table(["GPU", *(label for _, label in seeds)], [
        *([GPU_NAMES[g], *(pct(h["loco_mape_per_gpu"][g]) for h in hybrids)] for g in gpus),
        ["mean over GPUs", *(pct(h["loco_mape_overall"]) for h in hybrids)],
        *([f"vLLM {GPU_NAMES[k.split()[0]]}, {k.split()[1]}",
           *(pct(h["aiconfigurator_ge_0.01ms_mape"][k]) for h in hybrids)] for k in keys)])
    out += ["", "Commands: " + "; ".join(f"`{r.json_command(n)}`" for n, _ in seeds), ""]
    return out


def verbatim_section(r: Results, name: str, headings: Sequence[str] | None) -> list[str]:
    f = r.md(name)
    where = f.path.relative_to(ROOT).as_posix()
    out = [f"## {f.title} ({f.path.name})", "", (f"[{f.path.name}](../{where}), "
           f"written by `{f.command}`."), ""]
    last = None
    for t in f.under(headings):
        if t.heading != last and t.heading:
            out += [f"### {t.heading}", ""]
        last = t.heading
        # a tabulate "simple" table is plain text to markdown: keep its columns in a fence
        out += [*t.lines, ""] if t.lines[0].startswith("|") else ["```text", *t.lines, "```", ""]
    return out


def page(r: Results) -> str:
    out = [
        "# What accuracy to expect",
        "",
        ("<!-- written by `python benchmarks/accuracy_page.py` from benchmarks/results; "
        "do not edit -->"),
        "",
        ("Every figure below is copied from a committed results file by "
        "`python benchmarks/accuracy_page.py`; each section names the benchmark command that "
        "wrote its file. MAPE is the mean of |predicted − measured| / measured. *Its chip in "
        "the fit: no* means every board of that GPU's chip was left out of the fit that "
        "predicted it (the A100 PCIe 40GB, PCIe 80GB and SXM4 boards leave together, as do the "
        "two V100s): the way a GPU nobody measured is predicted. *yes* means the shipped "
        "weights, fitted on every measured GPU, that one included. Each results file also "
        "explains its misses in prose; follow its link."),
        "",
        "## Summary",
        "",
        *markdown_table(HEADER, [row.cells(docs_relative=True) for row in summary_rows(r)]),
        "",
        *gemm_json_section(r),
    ]
    for name, headings in VERBATIM:
        out += verbatim_section(r, name, headings)
    return "\n".join(out).rstrip("\n") + "\n"


def with_block(readme: str, block: str) -> str:
    """README.md's text with its accuracy block replaced by ``block``."""
    start, stop = readme.find(BEGIN), readme.find(END)
    if start < 0 or stop < start:
        raise ValueError(f"README.md has no {BEGIN!r} ... {END!r} block")
    return readme[:start] + block + readme[stop + len(END):]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if a file differs from what it would write")
    args = parser.parse_args(argv)
    r = Results(RESULTS)
    wanted = {PAGE: page(r), README: with_block(README.read_text(), readme_block(r))}
    stale = [p for p, text in wanted.items() if not p.is_file() or p.read_text() != text]
    if args.check:
        for p in stale:
            print(f"{p.relative_to(ROOT)} is stale: run python benchmarks/accuracy_page.py",
                  file=sys.stderr)
        return 1 if stale else 0
    PAGE.parent.mkdir(exist_ok=True)
    for p in stale:
        p.write_text(wanted[p])
        print(f"wrote {p.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
