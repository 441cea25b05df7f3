"""``torch-gemm-cost estimate``: a model's per-layer GEMM cost, from an HF config, a diffusers
config or a Python callable.

    torch-gemm-cost estimate --hf-config examples/gpt2.json --device a100_sxm4_80gb --dtype fp16
    torch-gemm-cost estimate --hf-config examples/vit_b16.json --batch 64 --html vit.html
    torch-gemm-cost estimate --diffusers-config unet.json --batch 2 --image-size 512
    torch-gemm-cost estimate mypkg.models:build --device h100_sxm5_80gb --device l4 --dtype bf16

The model is built on the meta device: no weights are allocated and nothing is downloaded.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import importlib.util
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

from . import UsageError, UserCodeError, config_file, raised_at, read_config, tasks
from .tasks import AUTO, DEFAULT_SEQ, TASKS, Sizes, check_task

logger = logging.getLogger(__name__)

DEFAULT_BATCH = 8
CAPTURE_METHODS = ("auto", "dispatch", "export", "eager")  # capture.core's, without torch


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "estimate",
        help="predict a model's GPU time, GEMM by GEMM",
        description="Predict a model's GPU time, GEMM by GEMM, without running it. The model "
        "comes from an HF config JSON (--hf-config), a diffusers config JSON "
        "(--diffusers-config) or a callable pkg.module:function that returns "
        "(model, args[, kwargs]).",
    )
    p.add_argument("callable", nargs="?", metavar="pkg.module:function",
                   help="a function returning (model, args[, kwargs]); it may take batch=, seq= "
                   "and image_size=")
    p.add_argument("--hf-config", metavar="PATH", help="an HF config.json (needs model_type)")
    p.add_argument("--task", type=_task, default=AUTO, metavar="TASK",
                   help=f"model head and inputs for --hf-config: {', '.join(TASKS)}; default "
                   f"{AUTO}, the head the config's architectures name")
    p.add_argument("--diffusers-config", metavar="PATH",
                   help="a diffusers UNet2DConditionModel or DiTTransformer2DModel config.json: "
                   "one denoising step (needs the diffusion extra)")
    p.add_argument("--attention", choices=tasks.ATTENTIONS, default=None,
                   help="attention implementation for --hf-config: sdpa (one fused kernel on a "
                   "GPU) or eager (two matmuls with the scores in memory between them); default: "
                   "what transformers builds, sdpa where the model has it, else eager")
    p.add_argument("--device", action="append", metavar="ID",
                   help="catalog id, GPU name, spec file (a GPU from its datasheet: `devices "
                   "--template`) or calibration profile JSON; repeat to compare devices (see "
                   "`devices`; default h100_sxm5_80gb)")
    p.add_argument("--dtype", default="bf16", help="compute dtype, e.g. fp16, bf16, fp8, float32")
    p.add_argument("--batch", type=int, default=DEFAULT_BATCH, help=f"default {DEFAULT_BATCH}")
    p.add_argument("--seq", type=int, default=None,
                   help=f"tokens per sequence (default: {DEFAULT_SEQ} or the model's maximum; "
                   "for --diffusers-config, 77 text tokens)")
    p.add_argument("--image-size", type=int, default=None, metavar="PIXELS",
                   help="image side for image tasks and diffusion (default: the config's)")
    p.add_argument("--audio-s", type=float, default=None, metavar="SECONDS",
                   help="seconds of audio for speech-seq2seq (default: 30, Whisper's window)")
    p.add_argument("--vae-factor", type=int, default=None, metavar="N",
                   help="image pixels per latent pixel for --diffusers-config (default: 8)")
    p.add_argument("--mode", choices=("inference", "train", "forward"), default="inference",
                   help="inference (default: one forward, every module in eval mode), train "
                   "(a training step: forward, backward and the optimizer's update) or forward "
                   "(one forward without autograd, each module's training flag as the "
                   "pkg.module:function builder left it: a BatchNorm not put in eval mode "
                   "computes its batch statistics, a dropout draws its mask)")
    p.add_argument("--capture-method", choices=CAPTURE_METHODS, default="auto",
                   help="how the model is traced: auto (default: dispatch, then export), "
                   "dispatch or export on fake tensors, or eager, which runs a real model "
                   "that a pkg.module:function builder returns")
    p.add_argument("--optimizer", choices=("adamw", "sgd", "none"), default=None,
                   help="the optimizer of a --mode train step: its update is priced and its "
                   "states (with the fp32 master weights of mixed precision) counted in the "
                   "memory; default adamw")
    p.add_argument("--compiled", action="store_true",
                   help="price the model as torch.compile (inductor, default mode) runs it: "
                   "non-GEMM ops fused into kernels")
    p.add_argument("--timing", choices=("event", "kernel", "graph"), default="event",
                   help="what the total measures: event (default: CUDA events around the call, "
                   "the host's Python, dispatch and launches included), kernel (the kernels' "
                   "sum, as a profiler shows it) or graph (a CUDA graph replay: its floor, the "
                   "input copies, the kernels)")
    p.add_argument("--host", type=Path, default=None, metavar="PROFILE",
                   help="price the host's Python, dispatch and launches with the host section "
                   "of a calibration profile (torch-gemm-cost calibrate --host) for every "
                   "--device; default: a --device profile's own, else the fitted hosts' prior "
                   "without the GPU's chip")
    p.add_argument("--predictor", choices=("default", "roofline"), default="default",
                   help="the package's default predictor, or the pure roofline (a floor)")
    p.add_argument("--depth", type=int, default=None,
                   help="aggregate the table by the module tree, cut at this many levels")
    p.add_argument("--top", type=int, default=None, metavar="N",
                   help="show the N costliest rows, the rest folded into one row")
    p.add_argument("--by", choices=("module", "op"), default="module",
                   help="rows by module (default) or by operator: op, class, count, time, share "
                   "(and each row's phase in a training step)")
    p.add_argument("--intervals", action="store_true",
                   help="show each row's 80%% interval (the totals line always has one)")
    p.add_argument("--json", nargs="?", const="-", metavar="PATH",
                   help="write the report as JSON (to stdout without PATH)")
    p.add_argument("--csv", nargs="?", const="-", metavar="PATH",
                   help="write one CSV line per GEMM (to stdout without PATH)")
    p.add_argument("--plot", metavar="PATH", help="save the roofline plot (needs matplotlib)")
    p.add_argument("--html", metavar="PATH",
                   help="write the report as one self-contained HTML page: totals, roofline "
                   "plot, padding advice, the table with time bars")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="no progress bar and no notes on the stages or the task picked (warnings, "
                   "errors and the files written are still said)")
    p.set_defaults(run=run)

    def error(message: str) -> NoReturn:  # one line, exit code 2, no usage dump
        print(f"torch-gemm-cost estimate: error: {message}", file=sys.stderr)
        raise SystemExit(2)

    p.error = error  # type: ignore[method-assign]


def _task(name: str) -> str:
    try:
        return check_task(name)
    except UsageError as e:
        raise argparse.ArgumentTypeError(str(e)) from e


@contextmanager
def _stage(label: str, show: bool = True) -> Iterator[None]:
    """Show ``label`` on stderr if the stage is still running after one second. Only on a
    terminal: piped or captured, stderr carries the results' warnings and errors alone."""
    if not show or not sys.stderr.isatty():
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
    sources = [args.hf_config, args.diffusers_config, args.callable]
    if sum(s is not None for s in sources) != 1:
        raise UsageError("give exactly one model source: --hf-config PATH, --diffusers-config "
                         "PATH or pkg.module:function")
    if args.hf_config is None and args.task != AUTO:
        raise UsageError("--task applies to --hf-config only; the others build their own model")
    if args.callable is None and args.capture_method == "eager":
        raise UsageError("--capture-method eager runs the model for real; --hf-config and "
                         "--diffusers-config build it on the meta device: give a "
                         "pkg.module:function that returns a real model")
    if args.hf_config is None and args.attention is not None:
        raise UsageError("--attention applies to --hf-config only; the others build their own "
                         "model")
    if args.diffusers_config is None and args.vae_factor is not None:
        raise UsageError("--vae-factor applies to --diffusers-config only")
    if args.image_size is not None and args.image_size < 1:
        raise UsageError(f"--image-size must be at least 1, got {args.image_size}; "
                         "try --image-size 224")
    if args.vae_factor is not None and args.vae_factor < 1:
        raise UsageError(f"--vae-factor must be at least 1, got {args.vae_factor}; "
                         "try --vae-factor 8")
    if args.audio_s is not None and not args.audio_s > 0:
        raise UsageError(f"--audio-s must be positive, got {args.audio_s:g}; try --audio-s 30")
    if args.audio_s is not None and args.callable is not None:
        raise UsageError("--audio-s applies to --hf-config with --task speech-seq2seq")
    if args.mode == "forward" and args.callable is None:
        raise UsageError("--mode forward prices the training flags a pkg.module:function "
                         "builder leaves on its model; --hf-config and --diffusers-config build "
                         "their own: use --mode inference")
    optimizer = getattr(args, "optimizer", None)
    if optimizer not in (None, "none") and args.mode != "train":
        raise UsageError(f"--optimizer {optimizer} applies to --mode train only")
    if args.batch < 1:
        raise UsageError(f"--batch must be at least 1, got {args.batch}; try --batch 1")
    if args.seq is not None and args.seq < 1:
        raise UsageError(f"--seq must be at least 1, got {args.seq}; try --seq 1")
    if args.depth is not None and args.depth < 1:
        raise UsageError(f"--depth must be at least 1, got {args.depth}; try --depth 1")
    if args.depth is not None and getattr(args, "by", "module") == "op":
        raise UsageError(f"--depth {args.depth} cuts the module tree; --by op has none: drop "
                         "--depth or use --by module")
    if args.top is not None and args.top < 1:
        raise UsageError(f"--top must be at least 1, got {args.top}; try --top 10")
    if args.hf_config is not None:
        # before any slow stage, so the error is its only line
        config_file("--hf-config", args.hf_config)
    if args.plot and importlib.util.find_spec("matplotlib") is None:
        from ..report.roofline import PLOT_INSTALL

        raise UsageError(f"--plot needs matplotlib: {PLOT_INSTALL}")
    if args.plot and args.plot != "-" and not Path(args.plot).parent.exists():
        raise UsageError(f"--plot {args.plot}: directory {Path(args.plot).parent} does not exist")
    if args.html and not Path(args.html).parent.exists():
        raise UsageError(f"--html {args.html}: directory {Path(args.html).parent} does not exist")


def _load_hf_config(path: str) -> tuple[Any, str]:
    """The config object and the model_type of an HF config JSON."""
    raw = read_config("--hf-config", path)
    if "model_type" not in raw:
        raise UsageError(f"--hf-config {path}: needs a \"model_type\" field, e.g. \"gpt2\"")
    from transformers import AutoConfig

    model_type = raw.pop("model_type")
    try:
        config = AutoConfig.for_model(model_type, **raw)
    except ValueError as e:
        raise UsageError(f"--hf-config {path}: unknown model_type {model_type!r}") from e
    return config, model_type


def build_hf_model(
    path: str, task: str | None, batch: int, seq: int | None, attention: str | None = None,
    image_size: int | None = None, audio_s: float | None = None,
) -> tuple[Any, tuple[Any, ...], dict[str, Any], Any]:
    """An HF model on the meta device and the inputs of its task (``tasks``): (model, args,
    kwargs, config). ``task`` None or ``auto`` picks the task from the config (``tasks.pick``);
    ``attention`` is the model's ``attn_implementation`` (``tasks.build``)."""
    config, _ = _load_hf_config(path)
    if task in (None, AUTO):
        task, _ = tasks.pick(config)
    model, args, kwargs = tasks.build(config, task, Sizes(batch, seq, image_size, audio_s),
                                       attention)
    return model, args, kwargs, config


def load_callable(spec: str, batch: int, seq: int | None, image_size: int | None = None
                  ) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
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
    where = _defined_at(fn)
    params = inspect.signature(fn).parameters
    call_kwargs: dict[str, Any] = {}
    if "batch" in params:
        call_kwargs["batch"] = batch
    if "seq" in params and seq is not None:
        call_kwargs["seq"] = seq
    if image_size is not None:
        if "image_size" not in params:
            raise UsageError(f"--image-size {image_size}: {spec} takes no image_size argument")
        call_kwargs["image_size"] = image_size
    try:
        inspect.signature(fn).bind(**call_kwargs)
    except TypeError as e:
        given = ", ".join(f"{k}={v}" for k, v in call_kwargs.items()) or "no arguments"
        raise UsageError(f"{spec}{where} cannot be called with {given}: {e}; a builder is "
                         "called with batch=, seq= and image_size= where it takes them, and "
                         "must need no other argument") from e
    try:
        out = fn(**call_kwargs)
    except Exception as e:  # the user's code, reported as theirs
        at = raised_at(e)
        raise UserCodeError(f"{spec} raised {type(e).__name__}: {e}"
                            + (f" (in {at})" if at else where)) from e
    if not isinstance(out, tuple) or len(out) not in (2, 3):
        raise UsageError(f"{spec}{where} must return (model, args) or (model, args, kwargs), "
                         f"got {type(out).__name__}")
    model, margs = out[0], out[1]
    kwargs = dict(out[2]) if len(out) == 3 else {}
    return model, tuple(margs) if isinstance(margs, (tuple, list)) else (margs,), kwargs


def _defined_at(fn: Any) -> str:
    """" (defined at file:line)" of a function, or "" where Python cannot say."""
    try:
        return f" (defined at {inspect.getsourcefile(fn)}:{inspect.getsourcelines(fn)[1]})"
    except (TypeError, OSError):
        return ""


def _predictor(name: str) -> Any:
    from ..predict import RooflinePredictor, default_predictor

    return RooflinePredictor() if name == "roofline" else default_predictor()


def estimate_reports(args: argparse.Namespace) -> list[Any]:
    """One report per --device, built as the command line says."""
    import torch_gemm_cost as tgc

    from ..capture.core import CaptureError
    from ..hardware.dtypes import resolve_dtype
    from ..hardware.target import resolve_target

    _check_args(args)
    dtype = resolve_dtype(args.dtype)
    device_args = list(args.device or ["h100_sxm5_80gb"])
    devices = [resolve_target(d).spec for d in device_args]
    for dev in devices:
        if not dev.supports(dtype) and dtype.peak_key in ("fp8", "int8"):
            have = [k for k, v in dev.peak_flops if v is not None]
            raise UsageError(f"--dtype {args.dtype}: {dev.id} has no {dtype.name} support; it has "
                             f"{', '.join(have)}")
    with _stage("building the model on meta", show=not args.quiet):
        model, margs, kwargs, asked = _build_model(args)
    # one capture for every device, so each warning (e.g. the unmodelled ops) is said once; a
    # calibration profile brings its own predictor unless --predictor says otherwise
    chosen = None if args.predictor == "default" else _predictor(args.predictor)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            reports = list(tgc.compare(model, margs, kwargs, devices=device_args,
                                       dtypes=[dtype.name], mode=args.mode, predictor=chosen,
                                       capture_method=args.capture_method,
                                       optimizer=_optimizer(args),
                                       progress=not args.quiet and sys.stderr.isatty(),
                                       compiled=getattr(args, "compiled", False),
                                       timing=getattr(args, "timing", "event"),
                                       host=_host(getattr(args, "host", None))))
    except CaptureError as e:  # the model or its inputs, not this program
        text = e.message(_cli_option(args))
        raise (UserCodeError(text) if args.callable else UsageError(text)) from e
    for message in dict.fromkeys(str(w.message) for w in caught):
        logger.warning("%s", message)  # one line each, not a source excerpt
    return [_with_inputs(r, asked) for r in reports]


def _host(path: Path | None) -> Any:
    """The host a --host profile measured (None: each device's own or the prior)."""
    if path is None:
        return None
    from ..predict.host import measured_prior

    try:
        profile = json.loads(path.read_text())
    except OSError as e:
        raise UsageError(f"--host {path}: cannot read it ({e.strerror})") from None
    except json.JSONDecodeError as e:
        raise UsageError(f"--host {path}: not JSON ({e.msg}, line {e.lineno})") from None
    section = profile.get("host") if isinstance(profile, dict) else None
    if section is None:
        raise UsageError(f"--host {path}: the profile has no host section; write one with "
                         "torch-gemm-cost calibrate --host")
    try:
        return measured_prior(section, f" ({path.name})")
    except ValueError as e:
        raise UsageError(f"--host {path}: {e}") from None


def _cli_option(args: argparse.Namespace) -> Any:
    """A capture method as this command spells it: ``--capture-method eager``, which needs a
    builder's real model where the model comes from a config."""
    def option(method: str) -> str:
        if method == "eager" and not args.callable:
            return ("--capture-method eager with a pkg.module:function that builds a real "
                    "model")
        return f"--capture-method {method}"

    return option


def _optimizer(args: argparse.Namespace) -> str | None:
    """The optimizer of the run: --optimizer, else AdamW for a training step."""
    if args.mode != "train":
        return None
    return getattr(args, "optimizer", None) or "adamw"


def _with_inputs(report: Any, asked: dict[str, Any]) -> Any:
    """``report`` stating what the command line built: its task, and the sizes the input
    tensors do not show (a diffusion step's image and text tokens)."""
    inputs = report.question()
    if "vae_factor" in asked and inputs.image_size is not None:  # latents -> the image's side
        asked = {**asked, "image_size": inputs.image_size * asked["vae_factor"]}
    asked = {k: v for k, v in asked.items() if k != "vae_factor"}
    return dataclasses.replace(report, inputs=dataclasses.replace(inputs, **asked))


def _build_model(args: argparse.Namespace
                 ) -> tuple[Any, tuple[Any, ...], dict[str, Any], dict[str, Any]]:
    """The model and its inputs from the one model source the command line names, and what
    the report's inputs should say that the tensors do not (the task). The task that --task
    auto picks is said on stderr, after the model is built."""
    if args.diffusers_config:
        from . import diffusion

        sizes = Sizes(args.batch, args.seq, args.image_size, args.audio_s)
        vae = args.vae_factor or diffusion.VAE_FACTOR
        model, margs, kwargs = diffusion.build(args.diffusers_config, sizes, vae)
        text = kwargs.get("encoder_hidden_states")
        return model, margs, kwargs, {"task": "diffusion-step", "vae_factor": vae,
                                      "seq": None if text is None else int(text.shape[1])}
    if args.callable:
        return (*load_callable(args.callable, args.batch, args.seq, args.image_size), {})
    model, margs, kwargs, config = build_hf_model(args.hf_config, args.task, args.batch,
                                                  args.seq, args.attention, args.image_size,
                                                  args.audio_s)
    task = args.task
    if task == AUTO:
        task, why = tasks.pick(config)
        if not args.quiet:
            print(f"--task {AUTO}: {task} ({why})", file=sys.stderr)
    return model, margs, kwargs, {"task": task}


def run(args: argparse.Namespace) -> int:
    from ..report import format_advice, format_comparison
    from ..report.memory_text import memory_text

    reports = estimate_reports(args)
    if args.json:
        data: Any = reports[0].to_dict() if len(reports) == 1 else [r.to_dict() for r in reports]
        _emit(args.json, json.dumps(data, indent=2))
    if args.csv:
        text = reports[0].to_csv() if len(reports) == 1 else "".join(
            r.to_csv() if i == 0 else r.to_csv().split("\n", 1)[1] for i, r in enumerate(reports)
        )
        _emit(args.csv, text.rstrip("\n"))
    for r in reports if args.plot else ():
        path = _per_device(args.plot, r, len(reports))
        r.plot_roofline(path)
        print(f"roofline plot written to {path}", file=sys.stderr)
    for r in reports if args.html else ():
        path = _per_device(args.html, r, len(reports))
        r.to_html(path, depth=args.depth, top=args.top, by=args.by)
        print(f"HTML report written to {path}", file=sys.stderr)
    if "-" in (args.json, args.csv):
        return 0
    if len(reports) > 1:
        print(format_comparison(reports, top=args.top or 5, depth=args.depth))
        for r in reports:
            if r.memory is not None:
                print(f"{r.device.id}: {memory_text(r.memory)}")
        return 0
    r = reports[0]
    print(r.table(depth=args.depth, top=args.top, intervals=args.intervals, by=args.by))
    print(r.footer())
    if r.memory is not None:
        print(memory_text(r.memory))
    if r.advice is not None:
        print(format_advice(r.advice[:5]))
    return 0


def _per_device(dest: str, report: Any, reports: int) -> Path:
    """The file of ``report`` among ``reports``: ``dest``, or ``dest`` with its device's id."""
    path = Path(dest)
    return path.with_name(f"{path.stem}_{report.device.id}{path.suffix}") if reports > 1 else path


def _emit(dest: str, text: str) -> None:
    if dest == "-":
        print(text)
    else:
        Path(dest).write_text(text + "\n")
        print(f"written to {dest}", file=sys.stderr)
