"""``raytpu plan``: which slice fits a model, to serve or to train, and what it costs per hour."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from raytpu.core.tpu.models import ModelShape
    from raytpu.sizing.candidates import Candidate
    from raytpu.sizing.memory import Need

HELP = "size a model to every TPU slice of the catalog: HBM fit, Ray, serving rules, $/h"

DEFAULT_CONTEXT = 4096
MAX_BATCH = 1_000_000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the model (one of --model, --model-config, --params), the workload and the output options."""
    from raytpu.console import argtypes
    from raytpu.core.tpu.models import MODELS
    from raytpu.sizing.memory import DEFAULT_DTYPE, DEFAULT_HEADROOM, DTYPE_BYTES, OPTIMIZER_STATES, REMAT

    which = parser.add_argument_group("the model (one of)")
    which.add_argument("--model", help="a built-in model: " + ", ".join(MODELS) + " (or its Hugging Face id)")
    which.add_argument("--model-config", metavar="FILE", type=argtypes.path, help="a Hugging Face config.json")
    which.add_argument("--params", metavar="N", help="a parameter count (8e9) for a rough answer")
    parser.add_argument("--mode", choices=("serve", "train"), default="serve")
    parser.add_argument("--context", type=int, default=None,
                        help=f"tokens per sequence (default {DEFAULT_CONTEXT}, at most the model's)")
    parser.add_argument("--batch", type=int, default=1, help="sequences at once (serve) or per step (train)")
    parser.add_argument("--dtype", choices=tuple(DTYPE_BYTES), default=None,
                        help=f"weights (default {DEFAULT_DTYPE['serve']} to serve, {DEFAULT_DTYPE['train']} to train)")
    parser.add_argument("--grad-dtype", choices=tuple(DTYPE_BYTES), default=None,
                        help="train: gradients (default: the weights' dtype)")
    parser.add_argument("--kv-dtype", choices=tuple(DTYPE_BYTES), default="bf16", help="serve: the KV cache")
    parser.add_argument("--optimizer", choices=tuple(OPTIMIZER_STATES), default="adamw", help="train")
    parser.add_argument("--optimizer-dtype", choices=tuple(DTYPE_BYTES), default="fp32",
                        help="train: optimizer state")
    parser.add_argument("--remat", choices=REMAT, default="full", help="train: activation rematerialization")
    parser.add_argument("--headroom", type=float, default=DEFAULT_HEADROOM,
                        help=f"fraction of HBM kept free (default {DEFAULT_HEADROOM:g})")
    parser.add_argument("--prices", metavar="FILE", type=argtypes.path,
                        help="a JSON price table (default: the built-in one)")
    parser.add_argument("--region", help="price this region from the built-in regional table (default: us-central1; "
                                         "v4: us-central2), e.g. your config's region")
    parser.add_argument("--tokens-per-s", type=float, default=None, help="serve: output tokens/s of a slice")
    parser.add_argument("--write-gb-s", type=float, default=None,
                        help="train: GCS checkpoint write throughput per TPU host, GB/s (default: an assumed 1)")
    parser.add_argument("--notice-s", type=int, default=None,
                        help="train: the slice's preemption notice, 30 or 120 s (default 30; 120: a spot slice's "
                             "preemption_notice_s)")
    parser.add_argument("--step-s", type=float, default=None,
                        help="train: seconds per training step, the step in flight at the notice (default: an "
                             "assumed 1)")
    parser.add_argument("--checkpoint-writers", default=None,
                        help="train: all (every host writes its shard; default) or one (one host writes it all, as "
                             "the kit's own trainer does)")
    parser.add_argument("--all", action="store_true", help="list every fitting slice, not the smallest few")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--plot", metavar="FILE", type=argtypes.path,
                        help="write on-demand $/h against HBM left free to FILE (.png, .svg or .pdf)")


def _shape(args: argparse.Namespace) -> tuple[ModelShape | None, int]:
    from raytpu.core.common import errors
    from raytpu.core.tpu import models
    from raytpu.sizing import hf_config

    given = [f for f in ("model", "model_config", "params") if getattr(args, f) is not None]
    if len(given) != 1:
        problem = "is required" if not given else f"was given with --{given[1].replace('_', '-')}"
        raise errors.InvalidInput("--model", problem, "exactly one of --model NAME, --model-config FILE, --params N")
    if args.model is not None:
        shape = models.model(args.model)
        return shape, shape.params()
    if args.model_config is not None:
        shape = hf_config.load_hf_config(args.model_config)
        return shape, shape.params()
    return None, models.rough_params(args.params)


def _check(args: argparse.Namespace, shape: ModelShape | None) -> None:
    from raytpu.core.common import errors
    from raytpu.core.tpu.models import check_context
    from raytpu.sizing.memory import DEFAULT_DTYPE

    if args.dtype is None:
        args.dtype = DEFAULT_DTYPE[args.mode]
    if args.grad_dtype is not None and args.mode != "train":
        raise errors.forbidden("--grad-dtype", args.grad_dtype, "with --mode serve", "--mode train")
    args.grad_dtype = args.grad_dtype or args.dtype
    if args.context is None:
        args.context = min(DEFAULT_CONTEXT, shape.max_positions) if shape else DEFAULT_CONTEXT
    check_context(args.context, shape)
    if not 1 <= args.batch <= MAX_BATCH:
        raise errors.invalid_value("--batch", args.batch, "is out of range", f"1..{MAX_BATCH} sequences")
    if not 0 <= args.headroom < 0.9:
        raise errors.invalid_value("--headroom", args.headroom, "is out of range",
                                   "a fraction in [0, 0.9) of HBM kept free (e.g. 0.1)")
    if args.tokens_per_s is not None and not 0 < args.tokens_per_s <= 1e9:
        raise errors.invalid_value("--tokens-per-s", args.tokens_per_s, "is out of range", "a rate in (0, 1e9]")
    if args.region is not None and args.prices is not None:
        raise errors.forbidden("--region", args.region, "with --prices (the file names its own region)",
                               "--region REGION or --prices FILE")
    from raytpu.sizing.preemption_budget import flag_problems

    errors.raise_found(flag_problems(args.mode, args.write_gb_s, args.notice_s, args.step_s,
                                     args.checkpoint_writers)[:1])  # the first, as each flag is read in turn
    if args.tokens_per_s is not None and args.mode != "serve":
        raise errors.forbidden("--tokens-per-s", args.tokens_per_s, "with --mode train", "--mode serve")
    if args.plot is not None:
        from raytpu.sizing import plot

        plot.target(args.plot)
        from raytpu.console import machine

        # matplotlib writes its config and font cache under MPLCONFIGDIR, else HOME (the cache under XDG_CACHE_HOME
        # when set), and temporary files in TMPDIR; an unusable one is refused, as before any plot: matplotlib would
        # fall back to a new temporary folder each run, with two lines of warning
        machine.check_environment("TMPDIR", *(("MPLCONFIGDIR",) if os.environ.get("MPLCONFIGDIR")
                                              else ("HOME", "XDG_CACHE_HOME")))
        if importlib.util.find_spec("matplotlib") is None:
            raise errors.invalid_value("--plot", args.plot, "needs matplotlib, which is not installed",
                                       "pip install 'raytpu[plot]' (requirements.lock pins it), or no --plot")


def _need_for(args: argparse.Namespace, shape: ModelShape | None, params: int) -> Callable[[int], Need]:
    from raytpu.sizing import memory

    if args.mode == "serve":
        return lambda tp: memory.serve_need(params, shape, dtype=args.dtype, kv_dtype=args.kv_dtype,
                                            context=args.context, batch=args.batch, tensor_parallel=tp)
    need = memory.train_need(params, shape, dtype=args.dtype, grad_dtype=args.grad_dtype, optimizer=args.optimizer,
                             optimizer_dtype=args.optimizer_dtype, context=args.context, batch=args.batch,
                             remat=args.remat)
    return lambda tp: need


def _nothing_fits(args: argparse.Namespace, found: list[Candidate]) -> None:
    """Exit 2 (invalid input: the request is impossible, as an impossible slice is), saying what would help."""
    from raytpu.core.common import errors
    from raytpu.sizing.memory import GIB

    largest = max(found, key=lambda c: c.usable_bytes, default=None)
    most = (f" (the largest, {largest.plan.generation} {largest.plan.topology}, leaves "
            f"{largest.usable_bytes / GIB:,.0f} GiB usable)" if largest else "")
    given = next(f for f in ("model", "model_config", "params") if getattr(args, f) is not None)
    train = ", --remat full, a bf16 --optimizer-dtype" if args.mode == "train" else ""
    need = f"needs {found[0].need.total / GIB:,.1f} GiB" if found else "needs more HBM"
    raise errors.InvalidInput(
        f"--{given.replace('_', '-')}", f"{need} at --context {args.context} x --batch {args.batch}, more than any "
        f"slice of the catalog holds{most}", f"a shorter --context, a smaller --batch, a lower --dtype (e.g. int8)"
        f"{train}, a smaller model, or several slices (a multi-slice workload)")


def _nothing_to_draw(args: argparse.Namespace, found: list[Candidate], region: str) -> None:
    """Exit 2 when every fitting slice is unusable or unpriced: --plot would draw an empty chart."""
    from raytpu.core.common import errors
    usable = [c for c in found if c.usable]
    given = next(f for f in ("model", "model_config", "params") if getattr(args, f) is not None)
    gens = ", ".join(dict.fromkeys(c.plan.generation for c in (usable or [c for c in found if c.fits])))
    why = (f"fits only slices with no on-demand price in {region} ({gens})" if usable else
           f"fits only slices Ray cannot reserve as one{' or that cannot serve it' if args.mode == 'serve' else ''}"
           f" ({gens})")
    raise errors.InvalidInput(
        f"--{given.replace('_', '-')}", f"{why}, so --plot has nothing to draw",
        "a smaller model, a shorter --context, a smaller --batch or a lower --dtype"
        + (", --prices FILE pricing them" if usable else "") + ", or no --plot (the table lists those slices)")


def run(args: argparse.Namespace) -> int:
    """Prints the need, the fitting slices (table or JSON) and, with --plot, writes the picture."""
    from raytpu.core.specs.serving import node_disk
    from raytpu.core.specs.slices import notice
    from raytpu.sizing import candidates, preemption_budget, prices
    from raytpu.sizing.memory import GIB
    from raytpu.sizing.plan_text import candidate_table, need_lines

    shape, params = _shape(args)
    _check(args, shape)
    table = (prices.load(args.prices) if args.prices else prices.regional_table(args.region) if args.region
             else prices.default_table())
    need_for = _need_for(args, shape, params)
    found = candidates.candidates(shape, args.mode, need_for, args.headroom, table, args.tokens_per_s)
    minimal = candidates.minimal_fits(found)
    best = candidates.cheapest(found)
    name = shape.name if shape else f"{params:.3g} parameters"
    need = need_for(1)
    if not any(c.fits for c in found):
        _nothing_fits(args, found)
    title = (f"{name}, {args.mode}, context {args.context} x batch {args.batch}, {args.dtype}"
             + (f", {args.optimizer}, remat {args.remat}" if args.mode == "train" else ""))
    if args.plot:
        from raytpu.sizing import plot

        if not plot.points(found):
            _nothing_to_draw(args, found, table.region)
        plot.write(args.plot, found, best, title)
    shown = [c.plan for c in found if c.fits]
    budget = preemption_budget.budget(need, args.write_gb_s, args.notice_s or notice.NOTICE_S, args.step_s,
                                      args.checkpoint_writers or "all") if args.mode == "train" else None
    disk = node_disk.host_disk(need.terms["weights"] / GIB) if args.mode == "serve" else None
    if args.json:
        print(json.dumps({
            "model": shape.to_json() if shape else {"name": name, "params": params},
            "mode": args.mode, "context": args.context, "batch": args.batch, "dtype": args.dtype,
            **({"grad_dtype": args.grad_dtype} if args.mode == "train" else {}),
            "headroom": args.headroom, "need": need.to_json(), "prices": table.to_json(),
            "tokens_per_s": args.tokens_per_s,
            "minimal": {g: f"{c.plan.topology}" for g, c in minimal.items()},
            "cheapest": best.to_json() if best else None,
            "candidates": [c.to_json() for c in found if c.fits],
            "plot": args.plot,
            **({"preemption": budget.to_json(shown)} if budget else {}),
            **({"disk": disk} if disk else {}),
        }, indent=2))
        return 0
    print("\n".join(need_lines(f"{title}: {params:,} parameters", need, args.headroom, disk, table,
                                tp_note=args.mode == "serve" and shape is not None)))
    print()
    lines = candidate_table(found, best, minimal, args.all, args.tokens_per_s is not None)
    print("\n".join(lines))
    print("< smallest usable slice of its generation; * cheapest usable on-demand"
          + (f"; plot: {args.plot}" if args.plot else ""))
    if budget:
        marked = [c.plan for c in found if c.fits and (c is best or minimal.get(c.plan.generation) is c)]
        print()
        print("\n".join(budget.lines(marked)))
    return 0
