"""Record real gloo jobs with planted stragglers on known ranks and steps, and their truth.

Purpose
    Truth for CPU-side attribution (issue 28) that evtsync did not make: real torch profiler
    traces of 4- and 8-rank CPU jobs on the gloo backend, in which the script itself makes chosen
    ranks late at chosen steps, measures how long each plant took, and writes what the plan
    says the analysis must find (``<out>.truth.json``) from the plan, the program's own log of the
    collectives it issued, and the measured plant durations — never from evtsync's output.

Jobs (``--job``)
    ``ddp``   4 ranks, one group (the world). A 4-layer MLP; after ``loss.backward()`` the
              gradients are all-reduced in 2 buckets (layers 3-2, then 1-0), synchronous,
              as DDP's buckets would be if not overlapped; then the scalar loss.
    ``tpdp``  4 ranks: tensor-parallel pairs TP01 {0,1}, TP23 {2,3} inside data-parallel
              pairs DP02 {0,2}, DP13 {1,3}, and the world. 2 layers, each with a TP all-reduce
              after its attention-like matmul and after its MLP (forward, and once more per
              all-reduce in the backward through a custom autograd Function, as Megatron's
              row-parallel layer); then each layer's gradient all-reduced on DP; then the
              scalar loss on the world.
    ``tpdp8`` the same structure on 8 ranks: TP pairs {0,1} … {6,7} inside DP groups of four
              DP0246 {0,2,4,6} and DP1357 {1,3,5,7}, and the world.
    ``--clean`` records the same job without plants (the clean twin: its tax is the noise).

Plants (not with ``--clean``), each on one rank at one recorded step (``PLANTS``):
    ``annotated_stall``  ``time.sleep`` inside ``record_function("data_loader_stall")``
    ``extra_matmul``     unannotated 256x256 ``torch.mm`` calls until the target time is spent
    ``bare_sleep``       ``time.sleep`` with no event around it (a gap in the main thread)
    ``slow_data``        a pure-Python busy loop where the batch is made (no event: a gap)
    Each plant's duration is measured with ``time.perf_counter_ns`` around it.

Profiling
    ``schedule(wait=1, warmup=1, active=2, repeat=2)`` over 8 steps: steps 2-3 and 6-7 are
    recorded, as two windows written by ``tensorboard_trace_handler(out, worker_name=f"rank{r}",
    use_gzip=True)`` (files ``rank{r}.<ms>.pt.trace.json.gz``). CPU activity only,
    ``record_shapes=True``. ``torch.set_num_threads(1)`` per rank.

<out>.truth.json (beside the folder)
    ``plants``: rank, step, kind, position (collectives the rank issued in that step before the
    plant), measured_us, expected ``cause`` (the event name the plant leaves on the main thread:
    ``data_loader_stall``, ``aten::mm`` or ``(python gap)``), ``affected``: for every group of the
    planted rank its first collective after the plant (pg_desc, index among that group's
    recorded collectives), whose straggler must be the planted rank; ``spread``: collectives of
    groups *without* the planted rank that the delay reaches through a member that first waited
    for the planted rank in a shared group, with only that member delayed (so its straggler must
    be that member and the root the planted rank). ``collectives``: per group its recorded count.

How to run (the separate Python 3.11 venv with the CPU build of torch 2.13.0, as in
tools/record_gloo_traces.py):
    .venv-torch/bin/python tools/record_gloo_planted.py --job tpdp --out tests/data/gloo-planted/tpdp
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
from torch.profiler import (
    ProfilerActivity,
    profile,
    record_function,
    schedule,
    tensorboard_trace_handler,
)

STEPS = 8
RECORDED_STEPS = (2, 3, 6, 7)
TOKENS = 64
HIDDEN = 256
#: (job, rank, step, kind, target ms, where): where = "data" (before the forward) or "layer1"
#: (before the second layer's forward).
PLANTS = {
    "ddp": [(1, 2, "annotated_stall", 30.0, "data"), (3, 3, "extra_matmul", 25.0, "layer1"),
            (2, 6, "bare_sleep", 20.0, "layer1"), (0, 7, "slow_data", 25.0, "data")],
    "tpdp": [(0, 2, "annotated_stall", 30.0, "data"), (3, 3, "extra_matmul", 25.0, "layer1"),
             (1, 6, "bare_sleep", 20.0, "layer1"), (2, 7, "slow_data", 25.0, "data")],
    "tpdp8": [(5, 2, "annotated_stall", 30.0, "data"), (2, 3, "extra_matmul", 25.0, "layer1"),
              (7, 6, "bare_sleep", 20.0, "layer1"), (0, 7, "slow_data", 25.0, "data")],
}
#: Ranks of each job; ``tpdp8``: TP pairs {0,1} … {6,7} inside DP groups of 4 {0,2,4,6}, {1,3,5,7}.
WORLD = {"ddp": 4, "tpdp": 4, "tpdp8": 8}
EXPECTED_CAUSE = {"annotated_stall": "data_loader_stall", "extra_matmul": "aten::mm",
                  "bare_sleep": "(python gap)", "slow_data": "(python gap)"}


def free_port() -> int:
    """Ask the kernel for a free TCP port on the loopback interface."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def plant(kind: str, target_ms: float) -> int:
    """Run one plant; return its measured duration in ns."""
    t0 = time.perf_counter_ns()
    target = int(target_ms * 1e6)
    if kind == "annotated_stall":
        with record_function("data_loader_stall"):
            time.sleep(target_ms / 1000.0)
    elif kind == "bare_sleep":
        time.sleep(target_ms / 1000.0)
    elif kind == "extra_matmul":
        a = torch.ones(HIDDEN, HIDDEN)
        while time.perf_counter_ns() - t0 < target:
            torch.mm(a, a)
    elif kind == "slow_data":
        while time.perf_counter_ns() - t0 < target:
            sum(range(2000))
    else:
        raise ValueError(kind)
    return time.perf_counter_ns() - t0


class TensorParallelAllReduce(torch.autograd.Function):
    """Sum over the TP group in the forward and again in the backward."""

    @staticmethod
    def forward(ctx, tensor: torch.Tensor, comm) -> torch.Tensor:
        """Sum a copy of the tensor over the group."""
        ctx.comm = comm
        out = tensor.clone()
        comm("TP", out)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        """Sum a copy of the gradient over the group."""
        out = grad.clone()
        ctx.comm("TP", out)
        return out, None


def worker(rank: int, job: str, clean: bool, out_dir: str) -> None:
    """One rank: init gloo, build the groups, run STEPS steps, write its traces and its log."""
    torch.set_num_threads(1)
    world = WORLD[job]
    if os.environ.get("RECORD_GLOO_PIN"):  # tools/record_gloo_twins.py: ranks in contiguous blocks per core
        cores = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cores[rank * len(cores) // world]})
    dist.init_process_group("gloo", rank=rank, world_size=world)
    groups: dict[str, tuple[object, str]] = {"WORLD": (None, "default_pg")}
    if job.startswith("tpdp"):
        tp = [[r, r + 1] for r in range(0, world, 2)]
        dp = [list(range(0, world, 2)), list(range(1, world, 2))]
        for kind, sets in (("TP", tp), ("DP", dp)):
            for ranks in sets:
                desc = kind + "".join(map(str, ranks))
                group = dist.new_group(ranks, group_desc=desc)
                if rank in ranks:
                    groups[kind] = (group, desc)
    log: list[dict] = []
    state = {"step": 0}

    def comm(kind: str, tensor: torch.Tensor) -> None:
        group, desc = groups[kind]
        log.append({"step": state["step"], "pg_desc": desc})
        dist.all_reduce(tensor, group=group)

    gen = torch.Generator().manual_seed(7)
    layers = 4 if job == "ddp" else 2
    job_kind = "ddp" if job == "ddp" else "tpdp"
    weights = [(torch.randn(HIDDEN, HIDDEN, generator=gen) * 0.05).requires_grad_(True) for _ in range(layers)]
    data_gen = torch.Generator().manual_seed(100 + rank)
    my_plants = [] if clean else [p for p in PLANTS[job] if p[0] == rank]
    measured = []

    def maybe_plant(step: int, where: str) -> None:
        for _, p_step, kind, ms, p_where in my_plants:
            if p_step == step and p_where == where:
                position = sum(1 for e in log if e["step"] == step)
                measured.append({"rank": rank, "step": step, "kind": kind, "target_ms": ms,
                                 "position": position, "measured_ns": plant(kind, ms)})

    handler = tensorboard_trace_handler(out_dir, worker_name=f"rank{rank}", use_gzip=True)
    # RECORD_GLOO_STACK (tools/record_gloo_twins.py --stack): Python frames, thread joins and GC passes
    stack = bool(os.environ.get("RECORD_GLOO_STACK"))
    extra = {"experimental_config": torch._C._profiler._ExperimentalConfig(record_python_gc_info=True)} if stack else {}
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=stack,
                 schedule=schedule(wait=1, warmup=1, active=2, repeat=2), on_trace_ready=handler, **extra) as prof:
        for step in range(STEPS):
            state["step"] = step
            maybe_plant(step, "data")
            x = torch.randn(TOKENS, HIDDEN, generator=data_gen)
            for layer, w in enumerate(weights):
                if layer == 1:
                    maybe_plant(step, "layer1")
                h = torch.matmul(x, w)
                if job_kind == "tpdp":
                    h = torch.matmul(torch.softmax(h, dim=-1), w.t())
                    h = TensorParallelAllReduce.apply(h, comm)
                    h = torch.nn.functional.gelu(torch.matmul(h, w))
                    h = TensorParallelAllReduce.apply(h, comm)
                else:
                    h = torch.nn.functional.gelu(h)
                x = x + h
            loss = (x * x).mean()
            loss.backward()
            if job_kind == "ddp":
                buckets = [weights[2:], weights[:2]]
                for bucket in buckets:
                    with record_function("ddp_bucket"):
                        flat = torch.cat([w.grad.reshape(-1) for w in bucket[::-1]])
                    comm("WORLD", flat)
            else:
                for w in reversed(weights):
                    comm("DP", w.grad)
            with torch.no_grad():
                for w in weights:
                    w -= 0.001 * w.grad
                    w.grad = None
            comm("WORLD", loss.detach().clone())
            prof.step()
    dist.barrier()
    with open(os.path.join(out_dir, f".log-rank{rank}.json"), "w") as fh:
        json.dump({"rank": rank, "log": log, "plants": measured,
                   "groups": {k: v[1] for k, v in groups.items()}}, fh)
    dist.destroy_process_group()


def truth_from_logs(job: str, clean: bool, logs: list[dict]) -> dict:
    """The expected findings, from the program's logs and the measured plants (see the module docstring)."""
    members: dict[str, set[int]] = {}
    for entry in logs:
        for desc in entry["groups"].values():
            members.setdefault(desc, set()).add(entry["rank"])
    recorded = {r["rank"]: [e for e in r["log"] if e["step"] in RECORDED_STEPS] for r in logs}

    def index_of(rank: int, step: int, position: int) -> int:
        """Index, among its group's recorded collectives, of the rank's call at (step, position)."""
        calls = [e for e in logs[rank]["log"] if e["step"] == step]
        desc = calls[position]["pg_desc"]
        before = [e for e in recorded[rank] if e["pg_desc"] == desc and e["step"] < step]
        return len(before) + sum(1 for e in calls[:position] if e["pg_desc"] == desc)

    plants = []
    for entry in sorted((p for r in logs for p in r["plants"]), key=lambda p: (p["step"], p["rank"])):
        rank, step, position = entry["rank"], entry["step"], entry["position"]
        calls = {r["rank"]: [e["pg_desc"] for e in r["log"] if e["step"] == step] for r in logs}
        # follow the delay in program order: a collective whose members are partly late makes the
        # others wait, and they are late (by the same time) from then on
        late, affected, spread = {rank}, [], []
        for pos in range(position, len(calls[rank])):
            for desc in sorted({calls[m][pos] for m in calls}):
                ranks = members[desc]
                reached = sorted(late & ranks)
                if len(reached) == 1 and len(ranks) > 1:
                    item = {"pg_desc": desc, "index": index_of(reached[0], step, pos), "straggler": reached[0]}
                    if reached[0] == rank:
                        affected.append(item)
                    else:
                        spread.append({**item, "root_rank": rank})
                if reached:
                    late |= ranks
        plants.append({"rank": rank, "step": step, "kind": entry["kind"], "position": position,
                       "target_ms": entry["target_ms"], "measured_us": entry["measured_ns"] / 1000.0,
                       "cause": EXPECTED_CAUSE[entry["kind"]], "affected": affected, "spread": spread})
    counts = {desc: len([e for e in recorded[min(ranks)] if e["pg_desc"] == desc]) for desc, ranks in members.items()}
    return {"job": job, "clean": clean, "world_size": WORLD[job], "recorded_steps": list(RECORDED_STEPS),
            "groups": {d: sorted(r) for d, r in members.items()}, "collectives": counts, "plants": plants,
            "torch": torch.__version__, "python": sys.version.split()[0]}


def main() -> int:
    """Spawn the ranks, check every rank wrote its traces, write truth.json."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--job", choices=sorted(PLANTS), required=True)
    parser.add_argument("--clean", action="store_true", help="no plants (the clean twin)")
    parser.add_argument("--out", type=Path, required=True, help="an empty or new folder")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if any(args.out.iterdir()):
        print(f"record_gloo_planted: {args.out} is not empty", file=sys.stderr)
        return 1
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(free_port())
    load = os.getloadavg()
    world = WORLD[args.job]
    mp.spawn(worker, args=(args.job, args.clean, str(args.out)), nprocs=world, join=True)
    logs = []
    for r in range(world):
        path = args.out / f".log-rank{r}.json"
        logs.append(json.loads(path.read_text()))
        path.unlink()
    truth = truth_from_logs(args.job, args.clean, logs)
    truth["load_average_at_start"] = [round(x, 2) for x in load]
    truth["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    # beside the folder, not in it: the folder holds the traces only (evtsync reads all of it)
    args.out.with_name(args.out.name + ".truth.json").write_text(json.dumps(truth, indent=1) + "\n")
    files = sorted(args.out.glob("*.pt.trace.json.gz"))
    if len(files) != world * 2:
        print(f"record_gloo_planted: {len(files)} trace files, expected {world * 2}", file=sys.stderr)
        return 1
    print(f"{len(files)} files, {sum(f.stat().st_size for f in files)} bytes; torch {torch.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
