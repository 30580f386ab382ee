"""Record a real pipeline-parallel gloo job (send/recv between stages + an all_reduce), and its truth.

Purpose
    Truth for gloo point-to-point (issue 46, item 1) that evtsync did not make: a 3-rank CPU job on
    the gloo backend in which each rank is one pipeline stage. Per step, stage 0 makes the batch and
    sends its activation to stage 1, which sends to stage 2 (``dist.send`` / ``dist.recv``, blocking);
    stage 2 computes the loss and the gradients flow back (2 -> 1 -> 0); then the scalar loss is
    all-reduced over the world (``dist.all_reduce``, synchronous). The stages run different code, so
    the ranks wait in different places (stage 1 and 2 in their ``recv``).

Plant (not with ``--clean``): at step 3, stage 1 runs extra 256x256 ``torch.mm`` calls inside
    ``record_function("expert_mm")`` for ``PLANT_MS`` before sending its activation on (measured with
    ``time.perf_counter_ns``). Stage 2 waits for it in its ``recv``, stage 0 in its backward ``recv``;
    everyone reaches the step's all_reduce late by that much, and rank 1 is its root.

Truth, from the job's own clocks (``time.perf_counter_ns`` and ``time.time_ns`` around every call,
    never from evtsync): ``<out>.truth.json`` beside the folder: per recorded step and rank the
    measured duration of each ``send``, ``recv`` and ``all_reduce`` call (``calls``), the
    all_reduce's max - min call duration (``allreduce_tau_us``, the tax evtsync measures from the
    ``gloo:all_reduce`` events, to within the worker thread's scheduling), the count of each kind of
    call per rank, and the plant.

Profiling
    ``schedule(wait=1, warmup=1, active=4, repeat=1)`` over 7 steps: steps 2-5 are recorded in one
    window, ``prof.export_chrome_trace(out/rank-{r}.json.gz)``; CPU activity only,
    ``record_shapes=True``; ``torch.set_num_threads(1)`` per rank.

With ``RECORD_GLOO_PIN=1`` (set by tools/record_gloo_twins.py ``--job pp3``) rank r runs on core
    r * n_cores // 3 only (on 2 cores: ranks 0-1 on core 0, rank 2 on core 1).

How to run (a Python 3.11 venv with the CPU build of torch 2.13.0, outside the repository):
    /work/wt/explain-torchvenv/bin/python tools/record_gloo_pipeline.py --out tests/data/gloo-pipeline/pp3
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.profiler import ProfilerActivity, profile, record_function, schedule

WORLD = 3
STEPS = 7
RECORDED_STEPS = (2, 3, 4, 5)
TOKENS, HIDDEN = 64, 256
PLANT_RANK, PLANT_STEP, PLANT_MS = 1, 3, 25.0


def free_port() -> int:
    """Ask the kernel for a free TCP port on the loopback interface."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def worker(rank: int, clean: bool, out_dir: str) -> None:
    """One stage: init gloo, run STEPS steps, write its trace and its log of timed calls."""
    torch.set_num_threads(1)
    if os.environ.get("RECORD_GLOO_PIN"):  # tools/record_gloo_twins.py: ranks in contiguous blocks per core
        cores = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cores[rank * len(cores) // WORLD]})
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    gen = torch.Generator().manual_seed(7 + rank)
    w = (torch.randn(HIDDEN, HIDDEN, generator=gen) * 0.05).requires_grad_(True)
    calls: list[dict] = []
    plants: list[dict] = []
    state = {"step": 0}

    def timed(kind: str, fn, *args, **kwargs):
        t0, e0 = time.perf_counter_ns(), time.time_ns()
        fn(*args, **kwargs)
        t1 = time.perf_counter_ns()
        calls.append({"step": state["step"], "kind": kind, "dur_ns": t1 - t0, "epoch_start_ns": e0})

    def prof_done(p) -> None:
        p.export_chrome_trace(os.path.join(out_dir, f"rank-{rank}.json.gz"))

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=False,
                 schedule=schedule(wait=1, warmup=1, active=4, repeat=1), on_trace_ready=prof_done) as prof:
        for step in range(STEPS):
            state["step"] = step
            if rank == 0:
                x = torch.randn(TOKENS, HIDDEN, generator=gen)
            else:
                x = torch.empty(TOKENS, HIDDEN)
                timed("recv", dist.recv, x, src=rank - 1)
            x.requires_grad_(True)
            with record_function("stage_forward"):
                h = torch.nn.functional.gelu(torch.matmul(x, w))
            if rank == PLANT_RANK and step == PLANT_STEP and not clean:
                t0 = time.perf_counter_ns()
                a = torch.ones(HIDDEN, HIDDEN)
                with record_function("expert_mm"):
                    while time.perf_counter_ns() - t0 < PLANT_MS * 1e6:
                        torch.mm(a, a)
                plants.append({"rank": rank, "step": step, "kind": "annotated_matmul", "annotation": "expert_mm",
                               "leaf_op": "aten::mm", "measured_us": (time.perf_counter_ns() - t0) / 1000.0})
            if rank < WORLD - 1:
                timed("send", dist.send, h.detach().contiguous(), dst=rank + 1)
                grad = torch.empty(TOKENS, HIDDEN)
                timed("recv", dist.recv, grad, src=rank + 1)
                h.backward(grad)
                loss = (h.detach() * grad).sum()
            else:
                loss = (h * h).mean()
                loss.backward()
            if rank > 0:
                timed("send", dist.send, x.grad.contiguous(), dst=rank - 1)
            with torch.no_grad():
                w -= 0.001 * w.grad
                w.grad = None
            timed("all_reduce", dist.all_reduce, loss.detach().clone())
            prof.step()
    dist.barrier()
    with open(os.path.join(out_dir, f".log-rank{rank}.json"), "w") as fh:
        json.dump({"rank": rank, "calls": calls, "plants": plants}, fh)
    dist.destroy_process_group()


def truth_from_logs(clean: bool, logs: list[dict]) -> dict:
    """What the job's own clocks say about the recorded steps (see the module docstring)."""
    recorded = {r["rank"]: [c for c in r["calls"] if c["step"] in RECORDED_STEPS] for r in logs}
    taus = []
    for step in RECORDED_STEPS:
        durs = [c["dur_ns"] for r in recorded for c in recorded[r] if c["step"] == step and c["kind"] == "all_reduce"]
        taus.append({"step": step, "allreduce_tau_us": (max(durs) - min(durs)) / 1000.0,
                     "allreduce_dur_us": [d / 1000.0 for d in durs]})
    counts = {str(r): {k: sum(1 for c in recorded[r] if c["kind"] == k) for k in ("send", "recv", "all_reduce")}
              for r in recorded}
    return {"job": "pp3", "clean": clean, "world_size": WORLD, "recorded_steps": list(RECORDED_STEPS),
            "calls_per_rank": counts, "allreduce": taus,
            "plants": [p for r in logs for p in r["plants"] if p["step"] in RECORDED_STEPS],
            "calls": {str(r): recorded[r] for r in recorded},
            "torch": torch.__version__, "python": sys.version.split()[0]}


def main() -> int:
    """Spawn the stages, check every rank wrote its trace, write truth.json beside the folder."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clean", action="store_true", help="no plant (the clean twin)")
    parser.add_argument("--out", type=Path, required=True, help="an empty or new folder")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if any(args.out.iterdir()):
        print(f"record_gloo_pipeline: {args.out} is not empty", file=sys.stderr)
        return 1
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(free_port())
    load = os.getloadavg()
    mp.spawn(worker, args=(args.clean, str(args.out)), nprocs=WORLD, join=True)
    logs = []
    for r in range(WORLD):
        path = args.out / f".log-rank{r}.json"
        logs.append(json.loads(path.read_text()))
        path.unlink()
    truth = truth_from_logs(args.clean, logs)
    truth["load_average_at_start"] = [round(x, 2) for x in load]
    truth["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    args.out.with_name(args.out.name + ".truth.json").write_text(json.dumps(truth, indent=1) + "\n")
    files = sorted(args.out.glob("rank-*.json.gz"))
    if len(files) != WORLD:
        print(f"record_gloo_pipeline: {len(files)} trace files, expected {WORLD}", file=sys.stderr)
        return 1
    print(f"{len(files)} files, {sum(f.stat().st_size for f in files)} bytes; torch {torch.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
