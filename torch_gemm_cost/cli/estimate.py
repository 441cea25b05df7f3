"""``torch-gemm-cost estimate``: a model's per-layer GEMM cost, from an HF config or a Python callable.

    torch-gemm-cost estimate --hf-config examples/gpt2.json --device a100_sxm4_80gb --dtype fp16
    torch-gemm-cost estimate mypkg.models:build --device h100_sxm5_80gb --device l4 --dtype bf16

The model is built on the meta device: no weights are allocated and nothing is downloaded.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import logging
import os
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

from . import UsageError

logger = logging.getLogger(__name__)

TASKS: dict[str, str] = {
    "causal-lm": "AutoModelForCausalLM",
    "seq-cls": "AutoModelForSequenceClassification",
    "pretraining": "AutoModelForPreTraining",
    "seq2seq": "AutoModelForSeq2SeqLM",
}
DEFAULT_BATCH = 8
DEFAULT_SEQ = 1024


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "estimate",
        help="predict a model's GPU time, GEMM by GEMM",
        description="Predict a model's GPU time, GEMM by GEMM, without running it. The model "
        "comes from an HF config JSON (--hf-config) or from a callable pkg.module:function that "
        "returns (model, args[, kwargs]).",
    )
    p.add_argument("callable", nargs="?", metavar="pkg.module:function",
                   help="a function returning (model, args[, kwargs]); it may take batch= and seq=")
    p.add_argument("--hf-config", metavar="PATH", help="an HF config.json (needs model_type)")
    p.add_argument("--task", choices=sorted(TASKS), default=None,
                   help="model head for --hf-config (default: causal-lm, or seq2seq for "
                   "encoder-decoder configs)")
    p.add_argument("--attn", choices=("eager", "sdpa"), default="eager",
                   help="attention implementation for --hf-config (default: eager)")
    p.add_argument("--device", action="append", metavar="ID",
                   help="catalog id, GPU name or calibration profile JSON; repeat to compare "
                   "devices (see `devices`; default h100_sxm5_80gb)")
    p.add_argument("--dtype", default="bf16", help="compute dtype, e.g. fp16, bf16, fp8, float32")
    p.add_argument("--batch", type=int, default=DEFAULT_BATCH, help=f"default {DEFAULT_BATCH}")
    p.add_argument("--seq", type=int, default=None,
                   help=f"tokens per sequence (default: {DEFAULT_SEQ} or the model's maximum)")
    p.add_argument("--mode", choices=("inference", "train"), default="inference")
    p.add_argument("--predictor", choices=("default", "roofline"), default="default",
                   help="the package's default predictor, or the pure roofline (a floor)")
    p.add_argument("--depth", type=int, default=None,
                   help="aggregate the table by the module tree, cut at this many levels")
    p.add_argument("--top", type=int, default=None, help="show only the costliest rows")
    p.add_argument("--intervals", action="store_true",
                   help="show each row's 80%% interval (the totals line always has one)")
    p.add_argument("--json", nargs="?", const="-", metavar="PATH",
                   help="write the report as JSON (to stdout without PATH)")
    p.add_argument("--csv", nargs="?", const="-", metavar="PATH",
                   help="write one CSV line per GEMM (to stdout without PATH)")
    p.add_argument("--plot", metavar="PATH", help="save the roofline plot (needs matplotlib)")
    p.set_defaults(run=run)

    def error(message: str) -> NoReturn:  # one line, exit code 2, no usage dump
        print(f"torch-gemm-cost estimate: error: {message}", file=sys.stderr)
        raise SystemExit(2)

    p.error = error  # type: ignore[method-assign]


@contextmanager
def _stage(label: str) -> Iterator[None]:
    """Show ``label`` on stderr if the stage is still running after one second. Only on a
    terminal: piped or captured, stderr carries the results' warnings and errors alone."""
    if not sys.stderr.isatty():
        yield
        return
    t0 = time.perf_counter()
    shown = threading.Event()

    def announce() -> None:
        shown.set()
        print(f"{label} ...", file=sys.stderr, flush=True)

    timer = threading.Timer(1.0, announce)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
    if shown.is_set():  # a failure says so itself, in one line
        print(f"{label}: done in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)


def _check_args(args: argparse.Namespace) -> None:
    if (args.hf_config is None) == (args.callable is None):
        raise UsageError("give exactly one model source: --hf-config PATH or pkg.module:function")
    if args.callable is not None and args.task is not None:
        raise UsageError("--task applies to --hf-config only; the callable builds its own model")
    if args.batch < 1:
        raise UsageError(f"--batch must be at least 1, got {args.batch}; try --batch 1")
    if args.seq is not None and args.seq < 1:
        raise UsageError(f"--seq must be at least 1, got {args.seq}; try --seq 1")
    if args.depth is not None and args.depth < 1:
        raise UsageError(f"--depth must be at least 1, got {args.depth}; try --depth 1")
    if args.top is not None and args.top < 1:
        raise UsageError(f"--top must be at least 1, got {args.top}; try --top 10")
    if args.hf_config is not None:
        _hf_config_file(args.hf_config)  # before any slow stage, so the error is its only line
    if args.plot and args.plot != "-" and not Path(args.plot).parent.exists():
        raise UsageError(f"--plot {args.plot}: directory {Path(args.plot).parent} does not exist")


def _hf_config_file(path: str) -> Path:
    """The config JSON that --hf-config names (a file, or a directory holding config.json)."""
    file = Path(path)
    if file.is_dir():
        file = file / "config.json"
    if not file.is_file():
        raise UsageError(f"--hf-config {path}: no such file")
    return file


def _load_hf_config(path: str) -> tuple[Any, str]:
    """The config object and the model_type of an HF config JSON."""
    file = _hf_config_file(path)
    try:
        raw = json.loads(file.read_text())
    except json.JSONDecodeError as e:
        raise UsageError(f"--hf-config {path}: not valid JSON ({e.msg} at line {e.lineno})") from e
    if not isinstance(raw, dict) or "model_type" not in raw:
        raise UsageError(f"--hf-config {path}: needs a \"model_type\" field, e.g. \"gpt2\"")
    from transformers import AutoConfig

    model_type = raw.pop("model_type")
    try:
        config = AutoConfig.for_model(model_type, **raw)
    except ValueError as e:
        raise UsageError(f"--hf-config {path}: unknown model_type {model_type!r}") from e
    return config, model_type


def _max_positions(config: Any) -> int | None:
    for name in ("max_position_embeddings", "n_positions", "n_ctx"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def build_hf_model(
    path: str, task: str | None, batch: int, seq: int | None, attn: str = "eager"
) -> tuple[Any, tuple[Any, ...], dict[str, Any], Any]:
    """An HF model on the meta device with input ids of ones: (model, args, kwargs, config)."""
    import torch
    import transformers

    config, _ = _load_hf_config(path)
    if task is None:
        task = "seq2seq" if getattr(config, "is_encoder_decoder", False) else "causal-lm"
    limit = _max_positions(config)
    if seq is None:
        seq = min(DEFAULT_SEQ, limit or DEFAULT_SEQ)
    elif limit is not None and seq > limit:
        raise UsageError(f"--seq {seq} exceeds the model's {limit} positions; use --seq {limit}")
    auto = getattr(transformers, TASKS[task])
    with torch.device("meta"):
        try:
            model = auto.from_config(config, attn_implementation=attn)
        except ValueError as e:
            first = str(e).splitlines()[0]
            raise UsageError(f"--task {task} does not fit {type(config).__name__}: {first}") from e
    ids = torch.ones(batch, seq, dtype=torch.long, device="meta")
    kwargs: dict[str, Any] = {}
    if task == "seq2seq":
        kwargs["decoder_input_ids"] = ids
    if task in ("causal-lm", "seq2seq") and getattr(config, "use_cache", False):
        kwargs["use_cache"] = False
    return model, (ids,), kwargs, config


def load_callable(spec: str, batch: int, seq: int | None) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    """Import ``pkg.module:function`` (from the working directory too) and call it."""
    mod_name, sep, fn_name = spec.partition(":")
    if not sep or not mod_name or not fn_name:
        raise UsageError(f"model source {spec!r} is not of the form pkg.module:function")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(mod_name)
    except ModuleNotFoundError as e:
        raise UsageError(f"cannot import {mod_name!r} from {spec!r}: {e}") from e
    fn = getattr(module, fn_name, None)
    if not callable(fn):
        names = [n for n in dir(module) if callable(getattr(module, n)) and not n.startswith("_")]
        raise UsageError(f"{mod_name} has no function {fn_name!r}; it has: {', '.join(names[:8])}")
    params = inspect.signature(fn).parameters
    call_kwargs: dict[str, Any] = {}
    if "batch" in params:
        call_kwargs["batch"] = batch
    if "seq" in params and seq is not None:
        call_kwargs["seq"] = seq
    out = fn(**call_kwargs)
    if not isinstance(out, tuple) or len(out) not in (2, 3):
        raise UsageError(f"{spec} must return (model, args) or (model, args, kwargs)")
    model, margs = out[0], out[1]
    kwargs = dict(out[2]) if len(out) == 3 else {}
    return model, tuple(margs) if isinstance(margs, (tuple, list)) else (margs,), kwargs


def _predictor(name: str) -> Any:
    from ..predict import RooflinePredictor, default_predictor

    return RooflinePredictor() if name == "roofline" else default_predictor()


def estimate_reports(args: argparse.Namespace) -> list[Any]:
    """One report per --device, built as the command line says."""
    import torch_gemm_cost as tgc

    from ..capture import CaptureError
    from ..dtypes import resolve_dtype
    from ..predict.query import resolve_target

    _check_args(args)
    dtype = resolve_dtype(args.dtype)
    device_args = list(args.device or ["h100_sxm5_80gb"])
    targets = [resolve_target(d) for d in device_args]
    devices = [spec for spec, _ in targets]
    for dev in devices:
        if not dev.supports(dtype) and dtype.peak_key in ("fp8", "int8"):
            have = [k for k, v in dev.peak_flops if v is not None]
            raise UsageError(f"--dtype {args.dtype}: {dev.id} has no {dtype.name} support; it has "
                             f"{', '.join(have)}")
    with _stage("building the model on meta"):
        if args.hf_config:
            model, margs, kwargs, _ = build_hf_model(
                args.hf_config, args.task, args.batch, args.seq, args.attn
            )
        else:
            model, margs, kwargs = load_callable(args.callable, args.batch, args.seq)
    # one capture for every device, so each warning (e.g. the unmodelled ops) is said once; a
    # calibration profile brings its own predictor unless --predictor says otherwise
    chosen = None if args.predictor == "default" else _predictor(args.predictor)
    names = ", ".join(dev.id for dev in devices)
    with _stage(f"estimating {type(model).__name__} on {names}"):
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                reports = list(tgc.compare(model, margs, kwargs, devices=device_args,
                                           dtypes=[dtype.name], mode=args.mode,
                                           predictor=chosen))
        except CaptureError as e:  # the model or its inputs, not this program
            raise UsageError(str(e)) from e
        for message in dict.fromkeys(str(w.message) for w in caught):
            logger.warning("%s", message)  # one line each, not a source excerpt
    return reports


def run(args: argparse.Namespace) -> int:
    from ..report import format_advice, format_comparison

    reports = estimate_reports(args)
    if args.json:
        data: Any = reports[0].to_dict() if len(reports) == 1 else [r.to_dict() for r in reports]
        _emit(args.json, json.dumps(data, indent=2))
    if args.csv:
        text = reports[0].to_csv() if len(reports) == 1 else "".join(
            r.to_csv() if i == 0 else r.to_csv().split("\n", 1)[1] for i, r in enumerate(reports)
        )
        _emit(args.csv, text.rstrip("\n"))
    if args.plot:
        for r in reports:
            path = Path(args.plot)
            if len(reports) > 1:
                path = path.with_name(f"{path.stem}_{r.device.id}{path.suffix}")
            r.plot_roofline(path)
            print(f"roofline plot written to {path}", file=sys.stderr)
    if "-" in (args.json, args.csv):
        return 0
    if len(reports) > 1:
        print(format_comparison(reports, top=args.top or 5, depth=args.depth))
        return 0
    r = reports[0]
    print(r.table(depth=args.depth, top=args.top, intervals=args.intervals))
    print(r.footer())
    if r.advice is not None:
        print(format_advice(r.advice[:5]))
    return 0


def _emit(dest: str, text: str) -> None:
    if dest == "-":
        print(text)
    else:
        Path(dest).write_text(text + "\n")
        print(f"written to {dest}", file=sys.stderr)
