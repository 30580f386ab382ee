"""``evtsync synth OUT_DIR``: a synthetic multi-rank trace set with its ground truth."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    from evtsync.cli._common import ListOption, add_out_argument
    from evtsync.synth.config import (
        DRIFT_SHAPES,
        FORMATS,
        GPU_MODELS,
        PLANT_BLOCKS,
        PLANT_KINDS,
        PRECISIONS,
        TP_MODES,
    )

    parser = sub.add_parser(
        "synth", help="write a synthetic multi-rank Kineto trace set with ground truth",
        description="Simulate a tensor-parallel transformer job and write one Kineto trace per rank "
        "(OUT_DIR/traces/) and OUT_DIR/ground_truth.json: per collective the per-rank durations, "
        "straggler and tax; per compute block the run times and pooled z-scores, drawn from a stated "
        "GEV; planted causes. Same seed, same bytes. See docs/synth.md.")
    parser.add_argument("out_dir", metavar="OUT_DIR", nargs="?", default=None,
                        help="output folder (created); the same as -o/--out")
    add_out_argument(parser, "folder", "output folder (created)")
    parser.add_argument("--json", action="store_true", help="print what was written (paths, counts, GEV) as JSON")
    lay = parser.add_argument_group("layout")
    lay.add_argument("--ranks", type=int, default=8, help="number of ranks (default 8)")
    lay.add_argument("--tp", type=int, default=4, help="TP group size; consecutive ranks (default 4)")
    lay.add_argument("--tp-mode", choices=TP_MODES, default="allreduce",
                     help="TP collectives: AllReduce, or ReduceScatter/AllGather (sequence parallel)")
    lay.add_argument("--fsdp", type=int, default=None, help="FSDP group size (one rank per TP group)")
    lay.add_argument("--ep", type=int, default=None, help="EP group size (consecutive ranks): adds AllToAll")
    lay.add_argument("--iterations", type=int, default=20, help="profiled iterations (default 20)")
    lay.add_argument("--layers", type=int, default=2, help="transformer layers per rank (default 2)")
    lay.add_argument("--gpu", choices=sorted(GPU_MODELS), default="H200", help="GPU model (default H200)")
    lay.add_argument("--precision", choices=PRECISIONS, default="bf16", help="GEMM precision (default bf16)")
    lay.add_argument("--gpus-per-host", type=int, default=8, help="GPUs per host (default 8)")
    lay.add_argument("--clock-offset-us", action=ListOption, item=float, default=None, metavar="US",
                     examples=("0", "250"),
                     help="per-host clock offsets: one value per host, or one step s (host h gets h*s; "
                          "default 250)")
    out = parser.add_argument_group("output")
    out.add_argument("--format", choices=FORMATS, default="modern",
                     help="modern (2024+: PG fields, ncclDevKernel_*, baseTimeNanoseconds) or legacy (2023)")
    out.add_argument("--gzip", action="store_true", help="write .json.gz")
    out.add_argument("--cuda-sync-events", action="store_true",
                     help="write cuda_sync events as enable_cuda_sync_events does")
    out.add_argument("--only-rank", action=ListOption, item=int, default=None, metavar="R", examples=("0", "1"),
                     help="write only these ranks' files (space or comma separated, repeatable; the simulation "
                          "covers all)")
    out.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    out.add_argument("--inspector", choices=("plain", "verbose"), default=None,
                     help="also write the NCCL Inspector logs of the job into OUT_DIR/inspector (verbose: "
                          "with kernel timestamps); read them with `evtsync tax OUT_DIR/inspector --rank-from order`")
    noise = parser.add_argument_group("noise and causes")
    noise.add_argument("--gev", type=float, nargs=3, metavar=("MU", "SIGMA", "XI"), default=None,
                       help="GEV of the block z-scores (Coles; default per GPU x precision)")
    noise.add_argument("--parent", choices=["normal", "gumbel", "lognormal", "gamma", "student-t", "mixture"],
                       default=None,
                       help="simulate ranks: every rank's block time drawn iid from this parent (standardised; "
                            "mixture = rare slow ranks), z-scores computed from them like any trace, and the true "
                            "mean straggler delay for n = m..4096 in ground_truth.json (default: z-scores designed "
                            "to follow --gev)")
    noise.add_argument("--cv", type=float, default=0.02, help="block run-time CV b/a (default 0.02)")
    noise.add_argument("--shock-sd", type=float, default=0.0, metavar="SD",
                       help="with --parent: a Normal shock of sd SD (units of the block sd b) shared by every rank "
                            "of each collective; it cancels in max - mean (default 0)")
    noise.add_argument("--drift", type=float, default=0.0, metavar="SD",
                       help="with --parent: a drift over the job spanning SD block sds from the first iteration to "
                            "the last, shared by all ranks (default 0)")
    noise.add_argument("--drift-shape", choices=DRIFT_SHAPES, default="linear",
                       help="the drift's shape: a line, or a half cosine (smooth: flat at both ends)")
    noise.add_argument("--slow-rank", action=ListOption, item=str, default=None, metavar="R:SD",
                       examples=("3:1.5", "5:1.5"),
                       help="with --parent: rank R persistently SD block sds slow in every block (several: spaces or "
                            "commas, or repeat the flag); "
                            "the truth is then stated for a job of n ranks from the same fleet")
    noise.add_argument("--cpu-delay-rate", type=float, default=0.002,
                       help="probability of a random Python gap before each op of each rank (default 0.002)")
    noise.add_argument("--plant", action="append", default=[], metavar="KIND:RANK:ITER:LAYER:BLOCK:DELAY_US",
                       help=f"plant a cause; KIND in {', '.join(PLANT_KINDS)}, BLOCK in {', '.join(PLANT_BLOCKS)} "
                            "(repeatable)")
    noise.add_argument("--launch-queue-depth", type=int, default=16,
                       help="kernels the CPU may queue ahead of the GPU before a launch blocks (default 16)")
    parser.add_argument("--study", choices=["demo", "ranks", "gev-design"], default=None,
                        help="write a study: several workloads, one folder each (demo: GPU x precision, simulated "
                             "ranks from the normal, lognormal and Gumbel parents, TP groups of 4 to 32; ranks: TP "
                             "groups of 16, 32, 64; gev-design: the earlier demo, z-scores following a stated GEV). "
                             "A study's entries fix their own layout (ranks, TP size, parent)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from evtsync.cli._common import emit_json
    from evtsync.core.errors import InputError
    from evtsync.synth import STUDIES, Plant, SynthConfig, study, synthesize
    from evtsync.synth.config import parse_slow_rank

    if bool(args.out) == bool(args.out_dir):
        raise InputError("synth: give the output folder once: -o/--out DIR (or OUT_DIR)")
    out_dir = args.out or args.out_dir

    options = {
        "ranks": args.ranks, "tp": args.tp, "fsdp": args.fsdp, "ep": args.ep, "tp_mode": args.tp_mode,
        "iterations": args.iterations, "layers": args.layers, "gpus_per_host": args.gpus_per_host,
        "clock_offset_us": args.clock_offset_us, "format": args.format, "gzip": args.gzip,
        "cuda_sync_events": args.cuda_sync_events, "seed": args.seed, "cv": args.cv,
        "cpu_delay_rate": args.cpu_delay_rate, "launch_queue_depth": args.launch_queue_depth,
        "plants": tuple(Plant.parse(p) for p in args.plant),
        "write_ranks": tuple(args.only_rank) if args.only_rank else None,
        "parent": args.parent, "shock_sd": args.shock_sd, "drift_sd": args.drift, "drift_shape": args.drift_shape,
        "slow_ranks": tuple(parse_slow_rank(v) for v in args.slow_rank or ()),
    }
    if args.study:
        results = study(out_dir, args.study, **options)
        if args.json:
            emit_json([{"workload": entry["workload"], "traces_dir": res.traces_dir, "n_traces": len(res.traces),
                        "truth": res.truth_path, "summary": res.summary}
                       for entry, res in zip(STUDIES[args.study], results, strict=True)])
            return 0
        for entry, res in zip(STUDIES[args.study], results, strict=True):
            gev = res.summary["gev"]
            parent = res.summary["parent"]
            noise = (f"ranks from the {parent} parent" if parent else
                     f"GEV(mu={gev['mu']}, sigma={gev['sigma']}, xi={gev['xi']})")
            print(f"{entry['workload']}: {len(res.traces)} traces in {res.traces_dir}, {noise}")
            _write_inspector(args, res)
        return 0
    cfg = SynthConfig.build(gpu=args.gpu, precision=args.precision,
                            gev=tuple(args.gev) if args.gev else None, **options)
    res = synthesize(cfg, out_dir)
    summary = res.summary
    if args.json:
        emit_json({"traces_dir": res.traces_dir, "n_traces": len(res.traces), "truth": res.truth_path,
                   "summary": summary})
        return 0
    print(f"{len(res.traces)} {cfg.format} traces ({cfg.gpu} {cfg.precision}, {cfg.ranks} ranks, TP {cfg.tp_size}, "
          f"{cfg.iterations} iterations) in {res.traces_dir}")
    print(f"{summary['n_collectives']} collectives ({summary['n_tp_collectives']} TP, median tau_max "
          f"{summary['median_tp_tau_max_us']} us), {summary['n_blocks']} block identities, "
          f"{summary['n_plants']} planted causes; truth in {res.truth_path}")
    _write_inspector(args, res)
    return 0


def _write_inspector(args: argparse.Namespace, res: object) -> None:
    """``--inspector``: the NCCL Inspector logs of the job just written."""
    if not args.inspector:
        return
    from evtsync.synth.inspector import INSPECTOR_DIR, write_inspector_logs

    folder = res.out_dir / INSPECTOR_DIR  # type: ignore[attr-defined]
    logs = write_inspector_logs(res.traces_dir, folder, verbose=args.inspector == "verbose",  # type: ignore[attr-defined]
                                compress=args.gzip)
    print(f"{len(logs)} NCCL Inspector logs ({args.inspector}) in {folder}")
