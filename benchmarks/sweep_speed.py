"""How fast a sweep runs: 1,000 serving plans of Llama-3-8B (5 GPUs x tp 1, 2 x 10 batches x
5 prompt lengths x 2 generation lengths), each `torch-gemm-cost sweep` run in a fresh process,
on one worker and on two local workers; the host's load beside, since it is shared. Writes
benchmarks/results/sweep_speed.md, the rows as CSV and the Pareto plot of TPOT against GPUs.

    python benchmarks/sweep_speed.py
"""

from __future__ import annotations

import csv
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
SWEEP = f"""kind: llm
hf-config: {ROOT / "examples" / "llama3_8b.json"}
device: [h100_sxm5_80gb, a100_sxm4_80gb, l40s, h200_sxm_141gb, l4]
tp: [1, 2]
batch: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
prompt: [128, 256, 512, 1024, 2048]
gen: [128, 512]
"""
TARGET_S = 60.0


def load() -> str:
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def cpu_s() -> float:
    """User and system seconds of this process's finished children (the sweeps and their
    workers)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run(workers: int, out: Path, pareto: Path | None = None
        ) -> tuple[float, float, str, str]:
    spec = out.with_suffix(".yaml")
    spec.write_text(SWEEP)
    before = load()
    cmd = [sys.executable, "-m", "torch_gemm_cost", "sweep", str(spec), "--out", str(out),
           "--workers", str(workers)]
    if pareto is not None:
        cmd += ["--pareto", str(pareto)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    t, c = time.perf_counter(), cpu_s()
    subprocess.run(cmd, check=True, env=env)
    return time.perf_counter() - t, cpu_s() - c, before, load()


def main() -> None:
    tmp = RESULTS / "sweep_speed_rows.csv"
    one_s, one_cpu, one_before, one_after = run(1, tmp, RESULTS / "sweep_pareto.png")
    two_s, two_cpu, two_before, two_after = run(2, tmp.with_name("sweep_speed_rows_2.csv"))
    rows = list(csv.DictReader(tmp.open()))
    errors = [r for r in rows if r["error"]]
    same = rows == list(csv.DictReader(tmp.with_name("sweep_speed_rows_2.csv").open()))
    tmp.with_name("sweep_speed_rows_2.csv").unlink()
    tmp.with_suffix(".yaml").unlink()
    tmp.with_name("sweep_speed_rows_2.yaml").unlink()
    # the rows name the config as the YAML gave it: relative to the repository, not this host
    tmp.write_text(tmp.read_text().replace(f"{ROOT}/", ""))
    kinds = sorted({r["error"].split(";")[0] for r in errors})
    text = f"""# Sweep speed: 1,000 serving plans of one model

Command: `python benchmarks/sweep_speed.py`. Each run is `torch-gemm-cost sweep` in a fresh
process (its captures and priced steps start cold), with `OMP_NUM_THREADS=1`. The host has 2
cores shared with other jobs: its 1-minute load average is given before and after each run,
and the CPU seconds the run used (user + system, all its processes) beside the wall time: on
a busy host the CPU time is what one free core would take.

The sweep (`llm`, Llama-3-8B from examples/llama3_8b.json): 5 GPUs x tp 1, 2 x batches 1-512
x prompts 128-2048 x 128 or 512 generated tokens = {len(rows)} rows, {len(errors)} of them
with an error ({"; ".join(kinds) if kinds else "none"}).

| workers | wall s | CPU s | plans per CPU s | load before | load after | target ({TARGET_S:.0f} s on one core) |
|---------|--------|-------|-----------------|-------------|------------|------------------|
| 1 | {one_s:.1f} | {one_cpu:.1f} | {len(rows) / one_cpu:.1f} | {one_before} | {one_after} | {"meets" if one_cpu <= TARGET_S else "misses"} |
| 2 | {two_s:.1f} | {two_cpu:.1f} | {len(rows) / two_cpu:.1f} | {two_before} | {two_after} | |

Speed-up on 2 workers: {one_s / two_s:.2f}x in wall time, with {two_cpu / one_cpu:.2f}x the CPU
time. The calls of one model structure run on one worker (`sweep.run.worker_tasks`): here
tp 1 on one, tp 2 on the other, so no structure is captured twice. The two runs' rows are
{"identical" if same else "NOT identical"}. On a host whose other jobs keep its cores busy (see
the load columns), a second worker finds no free core, and the wall-time speed-up measures the
host's load as much as the sweep.

How a plan is cheap: a worker captures each model structure (tp 1 and tp 2 shard Llama-3-8B
differently: two structures) six times (`llm.affine`) and derives every other step shape; each distinct (shape, GPU) is priced once per process and shared by the plans
(`llm.plan`); the batches of one (GPU, tp, prompt, gen) are one `plan_llm` call; each plan's
attention calls are one call of the attention model.

The rows are in `benchmarks/results/sweep_speed_rows.csv`; `sweep_pareto.png` plots TPOT
against GPUs, the Pareto front joined.
"""
    (RESULTS / "sweep_speed.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
