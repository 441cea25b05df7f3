"""The README's commands and code run as written, and its generated parts are current.

How the README's code blocks are run:

- Every ```bash block runs in a subprocess, its commands in order (a later one may read what an
  earlier one wrote), from a temporary directory that mirrors the repository root by symlinks,
  so ``examples/...`` resolves as from the root and nothing a command writes lands in the
  checkout. ``torch-gemm-cost`` runs as ``python -m torch_gemm_cost`` and ``python`` as this
  interpreter, with this checkout first on PYTHONPATH. Each command must exit 0.
- A line is split at `` && ``. ``pip install`` is not run (installing is CI's job). The test
  command of the quick start is not run either (it would run this file): it must equal the last
  line of ``.ci/run``, which CI runs.
- ``$EDITOR FILE`` is a person's step; the test stands in for them and fills in the two fields
  the spec template leaves for them (``id`` and ``name``), nothing else.
- A command whose comment says ``long job`` (``train``, tens of minutes) is parsed by the
  command line's own parser, which checks its arguments, and not run.
- Any other command fails the test, so a new kind of command cannot go unchecked.
- Every ```python block runs as a script from the same mirrored root.
- A ```text block right after a bash block is the output of that block's last command: each of
  its lines must be a line of that command's stdout; a line ending in `` …`` is a line's start.
- The blocks run two at a time, one torch thread each, the slowest (calibrate, the serving
  plan) first; identical blocks run once.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

from torch_gemm_cost.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```\n", re.DOTALL | re.MULTILINE)
TIMEOUT_S = 300


@dataclass(frozen=True)
class Block:
    """One code block of the README, with the output sample that follows it, if any."""

    lang: str
    text: str
    sample: tuple[str, ...] = ()


def readme_blocks() -> list[Block]:
    text = README.read_text()
    found = list(BLOCK.finditer(text))
    blocks = []
    for i, m in enumerate(found):
        if m.group(1) == "text":
            continue
        nxt = found[i + 1] if i + 1 < len(found) else None
        sample: tuple[str, ...] = ()
        if (nxt is not None and nxt.group(1) == "text" and m.group(1) == "bash"
                and not text[m.end():nxt.start()].strip()):
            sample = tuple(nxt.group(2).splitlines())
        blocks.append(Block(m.group(1), m.group(2), sample))
    return blocks


def ci_test_command() -> str:
    return (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]


def bash_lines(text: str) -> Iterator[str]:
    """The block's command lines, continuation lines joined, blank lines dropped."""
    yield from (ln for ln in text.replace("\\\n", " ").splitlines() if ln.strip())


def segments(line: str) -> list[str]:
    return [s.strip() for s in line.split(" && ")]


def words(segment: str) -> list[str]:
    return shlex.split(segment, comments=True)


def fill_spec_template(path: Path) -> None:
    record = json.loads(path.read_text())
    record.update(id="my_gpu", name="My GPU")
    path.write_text(json.dumps(record))


@dataclass(frozen=True)
class Run:
    """What one block did: each command's exit status, the last one's stdout, the errors."""

    label: str
    failures: tuple[str, ...]
    stdout: str


def run_bash(block: Block, cwd: Path, env: dict[str, str]) -> Run:
    failures: list[str] = []
    stdout = ""
    for line in bash_lines(block.text):
        if line == ci_test_command():
            continue
        for seg in segments(line):
            argv = words(seg)
            if argv[0] == "pip":
                continue
            if argv[0] == "$EDITOR":
                fill_spec_template(cwd / argv[1])
                continue
            if argv[0] not in ("torch-gemm-cost", "python"):
                failures.append(f"{seg!r}: this test does not know how to run it")
                continue
            if "long job" in seg.partition("#")[2]:
                build_parser().parse_args(argv[1:])  # argparse exits 2 on bad arguments
                continue
            shell = seg.replace("torch-gemm-cost", '"$PY" -m torch_gemm_cost', 1) \
                if argv[0] == "torch-gemm-cost" else seg.replace("python", '"$PY"', 1)
            done = subprocess.run(shell, shell=True, cwd=cwd, env=env, capture_output=True,
                                  text=True, timeout=TIMEOUT_S, check=False)
            if done.returncode != 0:
                failures.append(f"{seg!r} exited {done.returncode}:\n{done.stderr[-3000:]}")
            stdout = done.stdout
    return Run(block.text.splitlines()[0], tuple(failures), stdout)


def run_python(block: Block, cwd: Path, env: dict[str, str], index: int) -> Run:
    script = cwd / f"readme_block_{index}.py"
    script.write_text(block.text)
    done = subprocess.run([sys.executable, script.name], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=TIMEOUT_S, check=False)
    failure = f"exited {done.returncode}:\n{done.stderr[-3000:]}"
    failures = () if done.returncode == 0 else (failure,)
    return Run(block.text.splitlines()[0], failures, done.stdout)


def mirror(root: Path, into: Path) -> Path:
    for entry in root.iterdir():
        if entry.name != ".git":
            (into / entry.name).symlink_to(entry)
    return into


def distinct(blocks: list[Block]) -> list[Block]:
    """Blocks with the same commands run once, keeping any output sample either has."""
    out: dict[tuple[str, str], Block] = {}
    for b in blocks:
        key = (b.lang, b.text)
        if key not in out or b.sample:
            out[key] = b
    return list(out.values())


BLOCKS = distinct([b for b in readme_blocks() if b.lang in ("bash", "python")])


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Run]:
    env = {**os.environ, "PY": sys.executable, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}

    def one(i: int) -> Run:
        cwd = mirror(ROOT, tmp_path_factory.mktemp(f"block{i}"))
        b = BLOCKS[i]
        return run_bash(b, cwd, env) if b.lang == "bash" else run_python(b, cwd, env, i)

    # slowest first: the blocks that calibrate or plan, then the rest
    order = sorted(range(len(BLOCKS)), key=lambda i: not re.search(r"calibrate|llm",
                                                                    BLOCKS[i].text))
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(order, pool.map(one, order), strict=True))


@pytest.mark.parametrize("index", range(len(BLOCKS)),
                         ids=[b.text.splitlines()[0][:60] for b in BLOCKS])
def test_readme_block_runs(runs: dict[int, Run], index: int) -> None:
    run = runs[index]
    assert not run.failures, "\n".join(run.failures)
    out_lines = run.stdout.splitlines()
    for line in BLOCKS[index].sample:
        if line.endswith(" …"):
            ok = any(o.startswith(line.removesuffix(" …")) for o in out_lines)
        else:
            ok = line in out_lines
        assert ok, f"README output sample line not printed: {line!r}\nprinted:\n{run.stdout}"


def test_quick_start_is_two_lines_and_the_second_is_ci() -> None:
    text = README.read_text()
    section = text[text.index("## Quick start"):]
    section = section[:section.index("\n## ", 1)]
    (block,) = BLOCK.findall(section)
    assert block[0] == "bash"
    lines = list(bash_lines(block[1]))
    assert len(lines) == 2, lines
    assert lines[1] == ci_test_command()
    assert lines[0].startswith("pip install ") and " && torch-gemm-cost estimate " in lines[0]


def test_every_example_file_named_exists() -> None:
    named = set(re.findall(r"examples/[\w./-]*\w", README.read_text()))
    assert named, "the README names no example"
    missing = sorted(p for p in named if not (ROOT / p).is_file())
    assert not missing, f"README names files examples/ does not ship: {missing}"


def test_readme_is_short() -> None:
    assert len(README.read_text().splitlines()) <= 300


@functools.cache
def accuracy_page() -> ModuleType:
    spec = importlib.util.spec_from_file_location("accuracy_page",
                                                  ROOT / "benchmarks" / "accuracy_page.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_accuracy_page_and_table_are_current() -> None:
    page = accuracy_page()
    results = page.Results(page.RESULTS)
    assert page.PAGE.read_text() == page.page(results), \
        "docs/accuracy.md is stale: run python benchmarks/accuracy_page.py"
    readme = README.read_text()
    assert page.with_block(readme, page.readme_block(results)) == readme, \
        "README.md's accuracy table is stale: run python benchmarks/accuracy_page.py"


def test_accuracy_table_reads_the_results_it_links() -> None:
    # oracle: the held-out mean and the worst GPU as accuracy.json states them
    page = accuracy_page()
    acc = json.loads((page.RESULTS / "accuracy.json").read_text())["predictors"]["hybrid"]
    rows = page.summary_rows(page.Results(page.RESULTS))
    mean = next(r for r in rows if r.what.startswith("GEMMs, mean"))
    assert mean.ours == f"{100 * acc['loco_mape_overall']:.1f}%"
    worst = next(r for r in rows if r.what.startswith("GEMMs, worst GPU"))
    worst_gpu = max(acc["loco_mape_per_gpu"], key=acc["loco_mape_per_gpu"].__getitem__)
    assert worst.gpus == page.GPU_NAMES[worst_gpu]
    for r in rows:  # every linked file exists and names the linked script
        assert r.source.is_file() and (ROOT / r.command.split()[1]).is_file(), r


def test_results_tables_parse_by_heading_row_and_column(tmp_path: Path) -> None:
    # hand-made file: a pipe table and a tabulate "simple" table under two headings
    f = tmp_path / "x.md"
    f.write_text("# Title\n\nCommand: `python benchmarks/x.py --a 1`\n\n## One\n\n"
                 "| gpu | MAPE |\n|---|---|\n| a40 | 9.1% |\n| l4 | 12.0% |\n\n## Two\n\n"
                 "gpu      rows\n-----  ------\nb200       84\n")
    parsed = accuracy_page().read_results(f)
    assert (parsed.title, parsed.command, parsed.script) == (
        "Title", "python benchmarks/x.py --a 1", "benchmarks/x.py")
    assert parsed.table("One").row(gpu="l4")["MAPE"] == "12.0%"
    assert parsed.table("Two").row(gpu="b200")["rows"] == "84"
    with pytest.raises(KeyError, match="no column 'dtype'"):
        parsed.table("One").row(dtype="fp8")
    with pytest.raises(KeyError, match="no table 0 under a heading starting 'Three'"):
        parsed.table("Three")


def test_the_runner_reports_what_fails(tmp_path: Path) -> None:
    # a failing command, a command the runner does not know, and a long job with a bad argument
    env = {**os.environ, "PY": sys.executable}
    block = Block("bash", 'python -c "raise SystemExit(3)"\nls -l && python -c "print(1)"\n')
    run = run_bash(block, tmp_path, env)
    assert len(run.failures) == 2
    assert "exited 3" in run.failures[0]
    assert "'ls -l': this test does not know how to run it" == run.failures[1]
    assert run.stdout == "1\n"
    with pytest.raises(SystemExit) as exited:
        run_bash(Block("bash", "torch-gemm-cost train --steps many  # long job\n"), tmp_path, env)
    assert exited.value.code == 2
