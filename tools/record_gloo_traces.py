"""Record real PyTorch profiler (Kineto) traces of a 4-rank CPU gloo job, one file per rank.

Purpose
    evtsync must read what today's PyTorch profiler writes. The public traces in
    /work/shared/data/traces/ come from 2022-2025 releases; this script makes small, real,
    current ones on the CPU (no GPU needed) to serve as test fixtures (issue 8, part 1).
    It is a tool, not a dependency of the evtsync package.

What the job does
    4 processes (torch.multiprocessing.spawn), backend gloo, MASTER_ADDR=127.0.0.1 and a free
    port. Besides the default group (all 4 ranks) two process groups are created with
    ``dist.new_group(..., group_desc=...)``:

    - "TP"   pairs {0,1} and {2,3}  (tensor parallel: all_reduce of activations / gradients)
    - "FSDP" pairs {0,2} and {1,3}  (sharded data parallel: all_gather of the flat parameter
      before the forward, reduce_scatter of the flat gradient after the backward)

    new_group is collective over the whole world, so every rank creates all four subgroups
    in the same order and keeps the two it belongs to.

    Each step is a 2-layer transformer-like block on a [batch*seq, hidden] activation:
    layer norm, QKV projection, attention-ish matmuls (scores, softmax, weighted sum),
    output projection, TP all_reduce (a custom autograd Function calling ``dist.all_reduce``
    in the forward and again on the gradient in the backward, as Megatron's row-parallel layer),
    layer norm, 2-matmul GELU MLP, TP all_reduce, then backward. Per layer the flat
    parameter is all_gathered on FSDP before the forward (``dist.all_gather_single``) and its
    gradient reduce-scattered on FSDP after the backward (``dist.reduce_scatter_single``; gloo
    implements both in torch 2.13, so no substitute is needed; the older names
    ``all_gather_into_tensor`` / ``reduce_scatter_tensor`` are deprecated there). The scalar loss is
    all_reduced on the default group once per step.

    Per-rank imbalance: before each layer's attention, rank r runs
    ``(r + step + layer) % 4`` extra 384x384 matmuls inside a ``record_function`` named
    ``injected_imbalance``, so which rank is slowest changes from collective to collective
    and the collectives contain real waits. The schedule is deterministic; the durations are
    not (they are measured on a shared CPU).

Profiling
    ``torch.profiler.profile(activities=[CPU], record_shapes=True, with_stack=False,
    schedule=schedule(wait=1, warmup=1, active=4, repeat=1))`` over 6 steps: steps 0-1 are
    not recorded, steps 2-5 are (``ProfilerStep#2`` .. ``ProfilerStep#5``). on_trace_ready
    calls ``prof.export_chrome_trace(f"{out}/rank-{r}.json.gz")`` — a fixed, rank-named file
    rather than the tensorboard handler's ``{host}_{pid}.{ms}.pt.trace.json.gz``, so fixture
    names are stable. ``distributedInfo`` (backend, rank, world_size, pg_count, pg_config) is
    added by torch itself because the process group is initialised when profiling starts.
    torch.set_num_threads(1) per rank keeps 4 ranks from oversubscribing a small machine.

How to run (needs the separate Python 3.11 venv with the CPU build of torch 2.13.0)
    /root/.pyenv/versions/3.11.7/bin/python3.11 -m venv .venv-torch
    .venv-torch/bin/pip install torch==2.13.0 numpy
    .venv-torch/bin/python tools/record_gloo_traces.py --out tests/data/gloo-torch2.13

Made with torch 2.13.0+cpu, Python 3.11.7.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, record_function, schedule

WORLD_SIZE = 4
TP_PAIRS = ([0, 1], [2, 3])
FSDP_PAIRS = ([0, 2], [1, 3])
HIDDEN = 128
HEADS = 4
TOKENS = 64  # batch * sequence
LAYERS = 2
STEPS = 6
IMBALANCE_DIM = 384


def free_port() -> int:
    """Ask the kernel for a free TCP port on the loopback interface."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def make_groups(rank: int) -> tuple[dist.ProcessGroup, dist.ProcessGroup]:
    """Create the TP and FSDP subgroups (collectively, same order on every rank)."""
    tp_group = fsdp_group = None
    for ranks in TP_PAIRS:
        group = dist.new_group(ranks, group_desc=f"TP{ranks[0]}{ranks[1]}")
        if rank in ranks:
            tp_group = group
    for ranks in FSDP_PAIRS:
        group = dist.new_group(ranks, group_desc=f"FSDP{ranks[0]}{ranks[1]}")
        if rank in ranks:
            fsdp_group = group
    assert tp_group is not None and fsdp_group is not None
    return tp_group, fsdp_group


def layer_shapes() -> list[tuple[int, ...]]:
    """Parameter shapes of one layer (TP-local shard): LN1 w/b, QKV, out proj, LN2 w/b, MLP."""
    return [
        (HIDDEN,), (HIDDEN,),
        (HIDDEN, 3 * HIDDEN),
        (HIDDEN, HIDDEN),
        (HIDDEN,), (HIDDEN,),
        (HIDDEN, 2 * HIDDEN),
        (2 * HIDDEN, HIDDEN),
    ]


def layer_numel() -> int:
    """Number of elements of one layer's flat parameter."""
    total = 0
    for shape in layer_shapes():
        n = 1
        for d in shape:
            n *= d
        total += n
    return total


def unflatten(flat: torch.Tensor) -> list[torch.Tensor]:
    """Views of the flat parameter with the layer's parameter shapes."""
    views, offset = [], 0
    for shape in layer_shapes():
        n = 1
        for d in shape:
            n *= d
        views.append(flat[offset:offset + n].view(shape))
        offset += n
    return views


class TensorParallelAllReduce(torch.autograd.Function):
    """Sum over the TP group in the forward and again in the backward (as Megatron's row-parallel layer)."""

    @staticmethod
    def forward(ctx, tensor: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
        """Sum a copy of the tensor over the group."""
        ctx.group = group
        out = tensor.clone()
        dist.all_reduce(out, group=group)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        """Sum a copy of the gradient over the group."""
        out = grad.clone()
        dist.all_reduce(out, group=ctx.group)
        return out, None


def block(x: torch.Tensor, params: list[torch.Tensor], extra_matmuls: int,
          tp_group: dist.ProcessGroup) -> torch.Tensor:
    """One transformer-like layer; TP all_reduce after attention and after the MLP."""
    ln1_w, ln1_b, w_qkv, w_out, ln2_w, ln2_b, w_up, w_down = params
    with record_function("injected_imbalance"):
        a = torch.ones(IMBALANCE_DIM, IMBALANCE_DIM)
        for _ in range(extra_matmuls):
            a = torch.mm(a, a) * (1.0 / IMBALANCE_DIM)
    h = F.layer_norm(x, (HIDDEN,), ln1_w, ln1_b)
    q, k, v = torch.matmul(h, w_qkv).chunk(3, dim=-1)
    head_dim = HIDDEN // HEADS
    q = q.view(TOKENS, HEADS, head_dim).transpose(0, 1)
    k = k.view(TOKENS, HEADS, head_dim).transpose(0, 1)
    v = v.view(TOKENS, HEADS, head_dim).transpose(0, 1)
    scores = torch.softmax(torch.bmm(q, k.transpose(1, 2)) / head_dim ** 0.5, dim=-1)
    attn = torch.bmm(scores, v).transpose(0, 1).reshape(TOKENS, HIDDEN)
    attn = TensorParallelAllReduce.apply(torch.matmul(attn, w_out), tp_group)
    x = x + attn
    h = F.layer_norm(x, (HIDDEN,), ln2_w, ln2_b)
    mlp = torch.matmul(F.gelu(torch.matmul(h, w_up)), w_down)
    mlp = TensorParallelAllReduce.apply(mlp, tp_group)
    return x + mlp


def worker(rank: int, out_dir: str) -> None:
    """One rank: init gloo, build groups, run STEPS profiled steps, write rank-{rank}.json.gz."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD_SIZE)
    tp_group, fsdp_group = make_groups(rank)
    fsdp_rank = dist.get_rank(fsdp_group)
    fsdp_size = dist.get_world_size(fsdp_group)

    numel = layer_numel()
    assert numel % fsdp_size == 0
    shard_numel = numel // fsdp_size
    gen = torch.Generator().manual_seed(1000 + (rank % 2))  # same TP shard on both FSDP peers
    shards = []
    for _ in range(LAYERS):
        full = torch.randn(numel, generator=gen) * 0.02
        shards.append(full[fsdp_rank * shard_numel:(fsdp_rank + 1) * shard_numel].clone())
    data_gen = torch.Generator().manual_seed(rank // 2)  # TP peers see the same tokens

    def write_trace(prof: profile) -> None:
        prof.export_chrome_trace(os.path.join(out_dir, f"rank-{rank}.json.gz"))

    with profile(
        activities=[ProfilerActivity.CPU],
        record_shapes=True,
        with_stack=False,
        schedule=schedule(wait=1, warmup=1, active=STEPS - 2, repeat=1),
        on_trace_ready=write_trace,
    ) as prof:
        for step in range(STEPS):
            x = torch.randn(TOKENS, HIDDEN, generator=data_gen)
            flats = []
            for layer in range(LAYERS):
                with record_function(f"fsdp_all_gather_layer{layer}"):
                    flat = torch.empty(numel)
                    dist.all_gather_single(flat, shards[layer], group=fsdp_group)
                flat.requires_grad_(True)
                flats.append(flat)
                x = block(x, unflatten(flat), (rank + step + layer) % 4, tp_group)
            loss = (x * x).mean()
            loss.backward()
            for layer in reversed(range(LAYERS)):
                with record_function(f"fsdp_reduce_scatter_layer{layer}"):
                    grad_shard = torch.empty(shard_numel)
                    dist.reduce_scatter_single(grad_shard, flats[layer].grad, group=fsdp_group)
                shards[layer] -= 0.01 * grad_shard
            dist.all_reduce(loss.detach(), group=None)
            prof.step()
    dist.barrier()
    dist.destroy_process_group()


def main() -> int:
    """Spawn the 4 ranks and check that every rank wrote its trace."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for rank-{r}.json.gz")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(free_port())
    mp.spawn(worker, args=(str(args.out),), nprocs=WORLD_SIZE, join=True)
    missing = [r for r in range(WORLD_SIZE) if not (args.out / f"rank-{r}.json.gz").exists()]
    if missing:
        print(f"record_gloo_traces: no trace written by rank(s) {missing}", file=sys.stderr)
        return 1
    for r in range(WORLD_SIZE):
        path = args.out / f"rank-{r}.json.gz"
        print(f"{path}  {path.stat().st_size} bytes")
    print(f"torch {torch.__version__}, Python {sys.version.split()[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
