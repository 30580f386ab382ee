"""The simulation: CPU threads, CUDA streams and NCCL collectives of every rank, in lockstep.

Every rank runs the same program (a transformer iteration: embedding, per layer forward
attention and MLP blocks, backward in reverse, optimizer, ``loss.item()`` sync). The program
is a list of steps; each step is executed on every rank before the next one, so a collective
step sees every member's arrival and resolves at once:

- compute kernel: the CPU opens its op chain (``aten::linear`` > ``aten::matmul`` >
  ``aten::mm``), calls the launch API, the kernel starts on the compute stream at
  ``max(stream free or awaited collective end + fixed gap, launch end + latency)``. The
  launch call blocks while ``launch_queue_depth`` kernels are queued (CUDA's launch queue),
  which bounds how far the CPU runs ahead of the GPU;
- collective: each member enters when its preceding compute ends (and its launch is done);
  the kernel ends at ``max(entries) + transfer + jitter_r`` (jitter 0..2 us), so end times
  agree on a shared clock and the duration is wait + transfer.

All times are integer microseconds on one true clock; each host's written clock adds its
offset. Integer microseconds make the modern and legacy files of one seed describe the same
timeline exactly, and make the ground truth equal to what the files say.

CPU-side costs are drawn per iteration and step, shared by all ranks; a rank-specific jitter
is added only where the CPU is far (> 300 us) ahead of the GPU, so it never moves a kernel.
Hence, inside a compute block, the time that is not kernel time is the same on every rank
(span = busy + a rank-independent gap), unless a planted or random CPU delay made the GPU
wait — the truth records where that happened.
"""

from __future__ import annotations

import dataclasses
import logging
import statistics
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from evtsync.core.errors import InputError
from evtsync.synth.config import GPU_MODELS, SynthConfig
from evtsync.synth.kernels import DTYPE_BYTES, TORCH_DTYPE, KernelSpec, catalogue, nccl_kernel
from evtsync.synth.noise import BlockDesign, design_block, split_integer_rows

log = logging.getLogger("evtsync.synth.timeline")

COMPUTE_STREAM = 7
TP_STREAM = 24
FSDP_STREAM = 28
EP_STREAM = 32
SIDE_STREAM = 60
LAUNCH_LATENCY_US = 4
AUTOGRAD_TID_OFFSET = 9      # backward runs on the autograd thread, tid = pid + 9
NCCL_JITTER_MAX_US = 2
SEQ_LEN = 8192
INTER_HOST_GBPS = 45.0
LEGACY_EPOCH_US = 1_694_128_200_000_000      # 2023-09-07, like the DLRM traces
MODERN_BASE_NS = 1_717_200_000_000_000_000   # 2024-06-01
MODERN_REL0_US = 3_600_000_000              # modern ts: about an hour after baseTime
CBID = {"cudaLaunchKernel": 211, "cuLaunchKernelEx": 652, "cudaStreamSynchronize": 131,
        "cudaDeviceSynchronize": 165, "cudaEventRecord": 135, "cudaStreamWaitEvent": 147,
        "cudaMemcpyAsync": 41}
#: The event category of each runtime / driver API above (``cu*`` but not ``cuda*``: the driver's).
RUNTIME_CATEGORY = {name: "cuda_driver" if name.startswith("cu") and not name.startswith("cuda") else "cuda_runtime"
                    for name in CBID}
COLL_NAMES = {"allreduce": ("allreduce", "nccl:all_reduce", "c10d::allreduce_"),
              "reduce_scatter": ("_reduce_scatter_base", "nccl:_reduce_scatter_base", "c10d::_reduce_scatter_base_"),
              "allgather": ("_allgather_base", "nccl:_all_gather_base", "c10d::_allgather_base_"),
              "alltoall": ("all_to_all", "nccl:all_to_all", "c10d::alltoall_base_")}

MM_FWD = ("aten::linear", "aten::matmul", "aten::mm")
MM_BWD = ("autograd::engine::evaluate_function: MmBackward0", "MmBackward0", "aten::mm")


@dataclass
class Step:
    """One step of the per-iteration program."""

    kind: str                    # "kernel", "coll", "iter_begin", "optimizer_begin", "sync", "iter_end"
    ops: tuple[str, ...] = ()
    roles: tuple[str, ...] = ()
    base_us: tuple[float, ...] = ()
    layer: int = -1
    block: str = ""              # plant block name (fwd-attn, ...) for the block's first GEMM
    coll: str = ""               # collective type
    group_kind: str = ""         # tp / fsdp / ep
    nelems_in: int = 0
    nelems_out: int = 0
    waits: bool = False          # the compute stream waits for this collective
    after_compute: bool = True   # the collective waits for the compute stream
    # filled by the planner
    position: int = -1           # block position of the kernels (index of the closing TP collective)
    kidx: tuple[int, ...] = ()   # kernel indices within the block identity
    trailing: bool = False       # kernels after the last TP collective (belong to next iteration's block 0)
    tp_index: int = -1           # index of a TP collective within the iteration
    bwd: bool = False            # runs on the autograd thread


@dataclass
class RankState:
    """Per-rank simulation state."""

    rank: int
    host: int
    device: int
    pid: int
    tid: int = 0                 # CPU thread of the current step: main (= pid) or autograd
    cpu_t: int = 0
    compute_ready: int = 0
    stream_ready: dict[int, int] = field(default_factory=dict)
    dep: int = 0
    starts: deque[int] = field(default_factory=deque)
    corr: int = 5_000_000   # correlation ids: a range of their own, far above External ids (legacy kernels reuse them)
    ext: int = 0
    ev_idx: int = 0
    event_id: int = 0
    pending_entry: int = 0
    pending_launch_ts: int = 0
    pending_corr: int = 0
    pending_ext: int = 0
    events: list[dict[str, Any]] = field(default_factory=list)
    jitter_pool: list[int] = field(default_factory=list)
    ts_base: int = 0             # written timestamp of true time 0 on the rank's host clock (set by run)


class Simulation:
    """Builds the program, the noise design and runs the lockstep simulation."""

    def __init__(self, cfg: SynthConfig) -> None:
        self.cfg = cfg
        self.modern = cfg.format == "modern"
        self.spec = GPU_MODELS[cfg.gpu]
        self.kernels = catalogue(cfg.gpu, cfg.precision, self.modern)
        seeds = np.random.SeedSequence(cfg.seed).spawn(6)
        self.rng_design = np.random.default_rng(seeds[0])
        self.rng_cpu = np.random.default_rng(seeds[1])
        self.rng_nccl = np.random.default_rng(seeds[2])
        self.rng_delay = np.random.default_rng(seeds[3])
        self.rng_rank = [np.random.default_rng(s) for s in seeds[4].spawn(cfg.ranks)]
        self.rng_misc = np.random.default_rng(seeds[5])
        self.rng_shock = np.random.default_rng(np.random.SeedSequence([cfg.seed, 45]))
        self.write = set(cfg.ranks_to_write())
        self._build_groups()
        self.program = self._build_program()
        self._plan_blocks()
        self._design_noise()
        # truth: collective records go to ``collective_sink`` as they resolve (kept in
        # ``collectives`` unless a sink is set); block times stay in arrays
        self.collectives: list[dict[str, Any]] = []
        self.collective_sink: Callable[[dict[str, Any]], object] = self.collectives.append
        self.n_collectives = 0
        self.tp_tau_max: list[int] = []
        self.spans = {p: np.full((cfg.iterations + 1, cfg.ranks), -1, dtype=np.int64) for p in range(self.n_tp)}
        self.plant_records: list[dict[str, Any]] = []
        self.cpu_delays: list[dict[str, Any]] = []
        self._pending_cause: dict[tuple[int, int, int], dict[str, Any]] = {}
        self._pending_noise: dict[tuple[int, int, int], list[dict[str, Any]]] = {}
        self.pg_counter: dict[str, int] = {}
        self.plant_by_key = {(p.rank, p.iteration, p.layer, p.block): p for p in cfg.plants}
        self._kernel_idle: dict[tuple[int, int, int], int] = {}
        self._span_start: dict[tuple[int, int, int], int] = {}
        self._span_end: dict[tuple[int, int, int], int] = {}
        self._block_len = {p: len(lst) for p, lst in self.block_kernels.items()}
        self._op_args_cache: dict[str, dict[str, Any]] = {}
        self._kernel_args_cache: dict[KernelSpec, dict[str, Any]] = {}

    # ---------------------------------------------------------------- groups
    def _build_groups(self) -> None:
        cfg = self.cfg
        self.pgs: list[dict[str, Any]] = [
            {"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl",
             "pg_size": cfg.ranks, "ranks": list(range(cfg.ranks)), "kind": "default"}]
        for kind, groups, desc in (("tp", cfg.tp_groups, "mesh_tp"), ("fsdp", cfg.fsdp_groups, "mesh_dp_shard"),
                                   ("ep", cfg.ep_groups, "mesh_ep")):
            for g in groups:
                self.pgs.append({"pg_name": str(len(self.pgs)), "pg_desc": desc, "backend_config": "cuda:nccl",
                                 "pg_size": len(g), "ranks": list(g), "kind": kind})
        self.group_of: dict[tuple[str, int], dict[str, Any]] = {}
        for pg in self.pgs:
            if pg["kind"] != "default":
                for r in pg["ranks"]:
                    self.group_of[(pg["kind"], r)] = pg
        # samples of m ranks within each TP group: positions i with i % (n/m) == s
        m = cfg.sample_size
        self.samples: list[tuple[int, ...]] = []
        for g in cfg.tp_groups:
            k = len(g) // m
            for s in range(k):
                self.samples.append(tuple(g[i] for i in range(len(g)) if i % k == s))

    # ---------------------------------------------------------------- program
    def _gemm_us(self, m: int, n: int, k: int) -> float:
        """Nominal GEMM time: 72 % of the GPU's dense peak for this precision."""
        tf = self.spec["tflops"][self.cfg.precision]
        return 2.0 * m * n * k / (tf * 1e6 * 0.72)

    def _mem_us(self, nbytes: float) -> float:
        """Nominal memory-bound kernel time: 80 % of the HBM bandwidth."""
        return nbytes / (self.spec["mem_tbps"] * 1e6 * 0.8)

    def _build_program(self) -> list[Step]:
        """The per-iteration program: embedding, layers forward, layers backward, optimizer, sync."""
        cfg = self.cfg
        t, h, f, tp = cfg.tokens, cfg.hidden, cfg.ffn, cfg.tp_size
        eb = DTYPE_BYTES[cfg.precision]
        sp = cfg.tp_mode == "rs_ag"
        act = t * h * eb
        norm_us = self._mem_us(3 * act / (tp if sp else 1)) + 12
        ew_us = self._mem_us(3 * t * f / tp * eb) + 8
        add_us = self._mem_us(3 * act / (tp if sp else 1)) + 8
        qkv = self._gemm_us(t, int(1.25 * h) // tp, h)
        out = self._gemm_us(t, h, h // tp)
        up = self._gemm_us(t, 2 * f // tp, h)
        down = self._gemm_us(t, h, f // tp)
        attn_tf = self.spec["tflops"][cfg.precision] * (0.55 if cfg.precision == "bf16" else 0.5)
        flash = 4.0 * t * min(SEQ_LEN, t) * (h / tp) * 0.5 / (attn_tf * 1e6)
        emb_us = self._mem_us(2 * act) + 40
        opt_us = self._mem_us(16 * (2.25 * h * h + 3 * h * f) / tp * cfg.layers / max(1, len(cfg.fsdp_groups[0]) if cfg.fsdp_groups else 1)) / 2 + 30
        K = Step
        ar_nel = t * h
        steps: list[Step] = [K("iter_begin"), K("kernel", ("aten::embedding", "aten::index_select"), ("embedding",), (emb_us,))]
        params = int((2.25 * h * h + 3 * h * f) / tp)

        def tp_coll(kind: str, layer: int) -> Step:
            if kind == "allreduce":
                return K("coll", coll="allreduce", group_kind="tp", nelems_in=ar_nel, nelems_out=ar_nel, waits=True,
                         layer=layer)
            if kind == "reduce_scatter":
                return K("coll", coll="reduce_scatter", group_kind="tp", nelems_in=ar_nel, nelems_out=ar_nel // tp,
                         waits=True, layer=layer)
            return K("coll", coll="allgather", group_kind="tp", nelems_in=ar_nel // tp, nelems_out=ar_nel, waits=True,
                     layer=layer)

        def ep_coll(layer: int) -> list[Step]:
            if not cfg.ep_groups:
                return []
            n = t * h // tp
            return [K("coll", coll="alltoall", group_kind="ep", nelems_in=n, nelems_out=n, waits=True, layer=layer)]

        def norm(layer: int) -> Step:
            return K("kernel", ("aten::layer_norm", "aten::native_layer_norm"), ("norm_fwd",), (norm_us,), layer=layer)

        def add(layer: int) -> Step:
            return K("kernel", ("aten::add",), ("add",), (add_us,), layer=layer)

        def mm(role: str, us: float, layer: int, block: str = "", bwd: bool = False) -> Step:
            return K("kernel", MM_BWD if bwd else MM_FWD, (role,), (us,), layer=layer, block=block)

        red = "reduce_scatter" if sp else "allreduce"
        for layer in range(cfg.layers):
            if cfg.fsdp_groups:
                fs = len(cfg.fsdp_groups[0])
                steps.append(K("coll", coll="allgather", group_kind="fsdp", nelems_in=params // fs,
                               nelems_out=params, after_compute=False, layer=layer))
            if layer:
                steps.append(add(layer))
            steps.append(norm(layer))
            if sp:
                steps.append(tp_coll("allgather", layer))
            steps += [mm("gemm_qkv", qkv, layer, "fwd-attn"),
                      K("kernel", ("aten::scaled_dot_product_attention", "aten::_scaled_dot_product_flash_attention",
                                   "aten::_flash_attention_forward"), ("flash_fwd",), (flash,), layer=layer),
                      mm("gemm_out", out, layer), tp_coll(red, layer), *ep_coll(layer), add(layer), norm(layer)]
            if sp:
                steps.append(tp_coll("allgather", layer))
            steps += [mm("gemm_up", up, layer, "fwd-mlp"),
                      K("kernel", ("aten::silu",), ("silu",), (ew_us,), layer=layer),
                      K("kernel", ("aten::mul",), ("mul",), (ew_us,), layer=layer),
                      mm("gemm_down", down, layer), tp_coll(red, layer), *ep_coll(layer)]
        first_bwd = len(steps)
        for layer in reversed(range(cfg.layers)):
            if sp:
                steps += [K("kernel", ("autograd::engine::evaluate_function: AddBackward0", "AddBackward0", "aten::add"),
                            ("add",), (add_us,), layer=layer), tp_coll("allgather", layer)]
            steps += [mm("gemm_dgrad", down, layer, "bwd-mlp", True), mm("gemm_wgrad", down, layer, bwd=True),
                      K("kernel", ("autograd::engine::evaluate_function: SiluBackward0", "SiluBackward0", "aten::silu_backward"),
                        ("silu_bwd",), (ew_us,), layer=layer),
                      K("kernel", ("autograd::engine::evaluate_function: MulBackward0", "MulBackward0", "aten::mul"),
                        ("mul",), (ew_us,), layer=layer),
                      mm("gemm_dgrad", up, layer, bwd=True), mm("gemm_wgrad", up, layer, bwd=True)]
            nb = K("kernel", ("autograd::engine::evaluate_function: NativeLayerNormBackward0", "NativeLayerNormBackward0",
                              "aten::native_layer_norm_backward"), ("norm_bwd",), (norm_us * 1.6,), layer=layer)
            if sp:
                steps += [tp_coll("reduce_scatter", layer), nb, tp_coll("allgather", layer)]
            else:
                steps += [nb, tp_coll("allreduce", layer)]
            steps += [*ep_coll(layer), mm("gemm_dgrad", out, layer, "bwd-attn", True), mm("gemm_wgrad", out, layer, bwd=True),
                      K("kernel", ("autograd::engine::evaluate_function: ScaledDotProductFlashAttentionBackward0",
                                   "ScaledDotProductFlashAttentionBackward0",
                                   "aten::_scaled_dot_product_flash_attention_backward", "aten::_flash_attention_backward"),
                        ("flash_bwd_dot", "flash_bwd", "flash_bwd_convert"),
                        (self._mem_us(2 * act / tp) + 10, 2.5 * flash, self._mem_us(2 * act / tp) + 8), layer=layer),
                      K("kernel", ("autograd::engine::evaluate_function: SplitWithSizesBackward0", "SplitWithSizesBackward0",
                                   "aten::cat"), ("cat",), (self._mem_us(2.5 * act / tp) + 10,), layer=layer),
                      mm("gemm_dgrad", qkv, layer, bwd=True), mm("gemm_wgrad", qkv, layer, bwd=True)]
            nb2 = K("kernel", nb.ops, nb.roles, nb.base_us, layer=layer)
            if sp:
                steps += [tp_coll("reduce_scatter", layer), nb2]
            else:
                steps += [nb2, tp_coll("allreduce", layer)]
            if cfg.fsdp_groups:
                fs = len(cfg.fsdp_groups[0])
                steps.append(K("coll", coll="reduce_scatter", group_kind="fsdp", nelems_in=params,
                               nelems_out=params // fs, layer=layer))
        for st in steps[first_bwd:]:
            st.bwd = True
        steps += [K("optimizer_begin"),
                  K("kernel", ("aten::_fused_adamw_",), ("optimizer",), (opt_us,)),
                  K("kernel", ("aten::_fused_adamw_",), ("optimizer",), (opt_us * 0.6,)),
                  K("sync"), K("iter_end")]
        return steps

    # ---------------------------------------------------------------- blocks
    def _plan_blocks(self) -> None:
        """Assign each compute kernel its block position and index (see module docstring)."""
        tp_idx = 0
        per_pos: dict[int, list[tuple[int, int]]] = {}   # position -> [(step index, kernel number)]
        pending: list[tuple[int, int]] = []
        for si, st in enumerate(self.program):
            if st.kind == "kernel":
                pending += [(si, k) for k in range(len(st.roles))]
            elif st.kind == "coll" and st.group_kind == "tp":
                per_pos[tp_idx] = pending
                st.tp_index = tp_idx
                pending = []
                tp_idx += 1
        self.n_tp = tp_idx
        trailing = pending
        per_pos[0] = trailing + per_pos[0]
        self.block_kernels: dict[int, list[tuple[int, int]]] = per_pos
        trail_set = {s for s, _ in trailing}
        for p, lst in per_pos.items():
            kidx: dict[int, list[int]] = {}
            for n, (si, _k) in enumerate(lst):
                kidx.setdefault(si, []).append(n)
            for si, idx in kidx.items():
                self.program[si].position = p
                self.program[si].kidx = tuple(idx)
                self.program[si].trailing = si in trail_set
        self.n_trailing = len(trailing)
        # fixed, rank-independent GPU gap before each kernel of each block identity
        self.gaps = {p: self.rng_misc.integers(1, 5, len(lst)) for p, lst in per_pos.items()}
        self.weights = {p: np.array([self.program[si].base_us[k] for si, k in lst]) for p, lst in per_pos.items()}

    def _design_noise(self) -> None:
        """Per block identity, kernel durations (iteration, rank, kernel) in integer us."""
        cfg = self.cfg
        J = cfg.iterations
        m = cfg.sample_size
        gev = cfg.gev_params
        self.durations: dict[int, np.ndarray] = {}
        self.designs: dict[tuple[int, tuple[int, ...]], BlockDesign] = {}
        self.design_rows: dict[int, list[int]] = {}
        self.z_redraws = 0
        self.direction_redraws = 0
        for p in range(self.n_tp):
            w = self.weights[p]
            a = float(w.sum())
            rows = list(range(1, J)) if p == 0 else list(range(J))
            self.design_rows[p] = rows
            if cfg.parent is not None:  # simulated ranks: iid from the parent, every row
                from evtsync.synth.parents import get_parent

                d = get_parent(cfg.parent).standard_draws(self.rng_design, (J + 1, cfg.ranks))
                d = d + self._departures(p, J + 1)
                x = np.rint(a * (1.0 + cfg.cv * d)).astype(np.int64)
                if x.min() < 1:
                    raise InputError(f"synth: a block time of {x.min()} µs at block position {p} (cv {cfg.cv} with "
                                     f"the shock, drift or slow ranks): lower cv or the departures")
                self.durations[p] = split_integer_rows(x.reshape(-1), w).reshape(J + 1, cfg.ranks, len(w))
                continue
            d = self.rng_design.standard_normal((J + 1, cfg.ranks)) * 0.5   # non-design rows
            if rows:
                for sample in self.samples:
                    bd = design_block(self.rng_design, len(rows), m, gev)
                    self.designs[(p, sample)] = bd
                    self.z_redraws += bd.z_redraws
                    self.direction_redraws += bd.direction_redraws
                    for jj, j in enumerate(rows):
                        d[j, list(sample)] = bd.d[jj]
            x = np.rint(a * (1.0 + cfg.cv * d)).astype(np.int64)
            self.durations[p] = split_integer_rows(x.reshape(-1), w).reshape(J + 1, cfg.ranks, len(w))
        for pl in cfg.plants:
            if pl.kind == "slow_gemm":
                si = self._plant_step(pl.layer, pl.block)
                st = self.program[si]
                self.durations[st.position][pl.iteration + (1 if st.trailing else 0), pl.rank, st.kidx[0]] += pl.delay_us

    def _departures(self, p: int, rows: int) -> np.ndarray:
        """(rows, ranks) shifts in units of b of block position ``p`` (docs/synth.md, "Shocks, drift and
        slow ranks"): a shock per row shared by all ranks, the drift over the rows (iterations), each slow
        rank's persistent shift. Drawn from their own stream, so the parent's draws do not change."""
        cfg = self.cfg
        out = np.zeros((rows, cfg.ranks))
        if cfg.shock_sd:
            out += self.rng_shock.normal(0.0, cfg.shock_sd, rows)[:, None]
        if cfg.drift_sd:
            t = np.arange(rows) / max(rows - 1, 1)
            shape = t if cfg.drift_shape == "linear" else (1 - np.cos(np.pi * t)) / 2
            out += cfg.drift_sd * (shape - 0.5)[:, None]
        for r, sd in cfg.slow_ranks:
            out[:, r] += sd
        return out

    def _plant_step(self, layer: int, block: str) -> int:
        for si, st in enumerate(self.program):
            if st.kind == "kernel" and st.layer == layer and st.block == block:
                return si
        raise AssertionError(f"no step for layer {layer} block {block}")

    # ---------------------------------------------------------------- helpers
    def _ts(self, rs: RankState, t: int) -> int | float:
        """Written timestamp of true time ``t`` on the rank's host clock, in the file's format
        (``rs.ts_base``: the epoch plus the host's offset, integer µs, so the sum is exact)."""
        if self.modern:
            return float(rs.ts_base + t)
        return rs.ts_base + t

    def _dur(self, d: int) -> int | float:
        return float(d) if self.modern else d

    def _cpu_event(self, rs: RankState, cat: str, name: str, t0: int, t1: int, args: dict[str, Any] | None = None,
                   ext: int | None = None) -> None:
        """A CPU event; ``ext`` is an External id reserved when the event opened (else the next one)."""
        if ext is None:
            rs.ext += 1
            ext = rs.ext
        if rs.rank not in self.write:
            return
        rs.ev_idx += 1
        a: dict[str, Any] = {"External id": ext}
        if self.modern:
            a["Record function id"] = 0
        a["Ev Idx"] = rs.ev_idx
        if args:
            a.update(args)
        # self._ts and self._dur, inlined (this is the most frequent event)
        ts: int | float = rs.ts_base + t0
        dur: int | float = t1 - t0
        if self.modern:
            ts, dur = float(ts), float(dur)
        rs.events.append({"ph": "X", "cat": cat, "name": name, "pid": rs.pid, "tid": rs.tid,
                          "ts": ts, "dur": dur, "args": a})

    def _runtime(self, rs: RankState, name: str, t0: int, t1: int, ext: int) -> int:
        rs.corr += 1
        if rs.rank in self.write:
            cat = RUNTIME_CATEGORY[name]
            args = {"External id": ext if self.modern else rs.corr, "cbid": CBID[name], "correlation": rs.corr}
            if ext <= 0 and self.modern:
                del args["External id"]
            ts: int | float = rs.ts_base + t0
            dur: int | float = t1 - t0
            if self.modern:
                ts, dur = float(ts), float(dur)
            rs.events.append({"ph": "X", "cat": cat, "name": name, "pid": rs.pid, "tid": rs.tid,
                              "ts": ts, "dur": dur, "args": args})
        return rs.corr

    def _gpu_event(self, rs: RankState, spec: KernelSpec, stream: int, t0: int, t1: int, corr: int, ext: int,
                   launch_ts: int, extra: dict[str, Any] | None = None) -> None:
        if rs.rank not in self.write:
            return
        const = self._kernel_args_cache.get(spec)
        if const is None:
            const = self._kernel_args_cache[spec] = self._kernel_args(spec)
        args: dict[str, Any] = {"External id": ext if self.modern else corr, "queued": 0, "device": rs.device,
                                "context": 1, "stream": stream, "correlation": corr, **const}
        if extra:
            args.update(extra)
        ts = self._ts(rs, t0)
        rs.events.append({"ph": "X", "cat": "kernel", "name": spec.name, "pid": rs.device, "tid": stream,
                          "ts": ts, "dur": self._dur(t1 - t0), "args": args})
        rs.events.append({"ph": "s", "id": corr, "pid": rs.pid, "tid": rs.tid, "ts": self._ts(rs, launch_ts),
                          "cat": "ac2g", "name": "ac2g"})
        rs.events.append({"ph": "f", "id": corr, "pid": rs.device, "tid": stream, "ts": ts,
                          "cat": "ac2g", "name": "ac2g", "bp": "e"})

    def _kernel_args(self, spec: KernelSpec) -> dict[str, Any]:
        """The arguments of a kernel event that depend on its spec alone (computed once per spec; the
        geometry stays a tuple, which orjson writes as the same JSON list)."""
        sms = self.spec["props"]["numSms"]
        blocks = spec.grid[0] * spec.grid[1] * spec.grid[2]
        threads = spec.block[0] * spec.block[1] * spec.block[2]
        return {"registers per thread": spec.registers, "shared memory": spec.shared_memory,
                "blocks per SM": round(blocks / sms, 6), "warps per SM": round(blocks * threads / 32 / sms, 6),
                "grid": tuple(spec.grid), "block": tuple(spec.block),
                "est. achieved occupancy %": min(100, int(blocks * threads / 32 / sms / 64 * 100))}

    def _sync_event(self, rs: RankState, kind: str, stream: int, t0: int, t1: int, corr: int,
                    extra: dict[str, Any] | None = None) -> None:
        if rs.rank not in self.write or not self.cfg.cuda_sync_events:
            return
        tid = stream if kind in ("Stream Sync", "Stream Wait Event") else -1
        s = stream if tid != -1 else (-1 if self.modern else 4294967295)
        args: dict[str, Any] = {"External id": corr, "cuda_sync_kind": kind}
        if extra:
            args.update(extra)
        args.update({"stream": s, "correlation": corr, "device": rs.device, "context": 1})
        rs.events.append({"ph": "X", "cat": "cuda_sync", "name": kind, "pid": rs.device, "tid": tid,
                          "ts": self._ts(rs, t0), "dur": self._dur(t1 - t0), "args": args})

    def _cpu_cost(self, lo: int, hi: int, size: int | None = None) -> Any:
        return self.rng_cpu.integers(lo, hi + 1, size)

    # ---------------------------------------------------------------- run
    def run(self, sink: Callable[[int, int, list[dict[str, Any]]], None]) -> None:
        """Simulate every iteration; after each one, hand each written rank's events to ``sink``."""
        cfg = self.cfg
        self.states = [RankState(r, cfg.host_of(r), r % cfg.gpus_per_host, 40000 + 17 * r) for r in range(cfg.ranks)]
        epoch = MODERN_REL0_US if self.modern else LEGACY_EPOCH_US
        for rs in self.states:
            rs.cpu_t = 200
            rs.tid = rs.pid
            rs.ts_base = epoch + cfg.clock_offsets_us[rs.host]
        # the block times and GPU gaps as Python lists, read one number at a time below (indexing
        # a NumPy array per kernel costs more than the kernel's whole event)
        self._durations_list = {p: d.tolist() for p, d in self.durations.items()}
        self._gaps_list = {p: g.tolist() for p, g in self.gaps.items()}
        for j in range(cfg.iterations):
            self._iteration(j)
            for rs in self.states:
                if rs.rank in self.write:
                    sink(rs.rank, j, rs.events)
                rs.events = []

    def _iteration(self, j: int) -> None:
        cfg = self.cfg
        states = self.states
        step_open: dict[int, tuple[int, int]] = {}
        opt_open: dict[int, tuple[int, int]] = {}
        for si, st in enumerate(self.program):
            for rs in states:
                rs.tid = rs.pid + AUTOGRAD_TID_OFFSET if st.bwd else rs.pid
            if st.kind == "iter_begin":
                gap, lead = (int(v) for v in self._cpu_cost(8, 40, 2))
                for rs in states:
                    rs.cpu_t += gap
                    rs.ext += 1
                    step_open[rs.rank] = (rs.cpu_t, rs.ext)
                    rs.cpu_t += lead
            elif st.kind == "kernel":
                costs = self._kernel_costs(st)
                for rs in states:
                    self._kernel_step(rs, j, si, st, costs)
            elif st.kind == "coll":
                costs = self._cpu_cost(2, 6, 12)
                for rs in states:
                    self._coll_launch(rs, st, costs)
                self._resolve(j, st)
            elif st.kind == "optimizer_begin":
                for rs in states:
                    rs.cpu_t += 10
                    rs.ext += 1
                    opt_open[rs.rank] = (rs.cpu_t, rs.ext)
            elif st.kind == "sync":
                costs = self._cpu_cost(3, 8, 6)
                for rs in states:
                    t_open, ext = opt_open[rs.rank]
                    self._cpu_event(rs, "user_annotation", "Optimizer.step#AdamW.step", t_open, rs.cpu_t + 4, ext=ext)
                    rs.cpu_t += 4
                    self._item_sync(rs, costs)
            elif st.kind == "iter_end":
                tail = int(self._cpu_cost(30, 60))
                for rs in states:
                    rs.cpu_t += 6
                    t_open, ext = step_open[rs.rank]
                    self._cpu_event(rs, "user_annotation", f"ProfilerStep#{cfg.first_step + j}", t_open, rs.cpu_t, ext=ext)
                    rs.cpu_t += tail
                    if j == cfg.iterations - 1:
                        # the profiler's stop drains the device, as in the real 2023 traces
                        drain = max(rs.compute_ready, *rs.stream_ready.values()) if rs.stream_ready else rs.compute_ready
                        s1 = max(rs.cpu_t + 4, drain + 2)
                        corr = self._runtime(rs, "cudaDeviceSynchronize", rs.cpu_t, s1, rs.ext)
                        self._sync_event(rs, "Context Sync", -1, rs.cpu_t + 1, s1, corr)
                        rs.cpu_t = s1 + 3
        self._record_blocks(j)

    def _kernel_costs(self, st: Step) -> dict[str, Any]:
        depth = len(st.ops)
        return {"py_gap": int(self._cpu_cost(4, 14)), "pre": self._cpu_cost(2, 6, depth).tolist(),
                "post": self._cpu_cost(1, 4, depth).tolist(), "launch": self._cpu_cost(5, 11, len(st.roles)).tolist(),
                "between": int(self._cpu_cost(1, 3))}

    def _jitter(self, rs: RankState, hi: int) -> int:
        """Rank-specific CPU jitter in 0..hi us, only where the CPU is far ahead of the GPU."""
        if rs.compute_ready - rs.cpu_t <= 300:
            return 0
        if not rs.jitter_pool:
            rs.jitter_pool = self.rng_rank[rs.rank].integers(0, 1 << 30, 4096).tolist()
        return rs.jitter_pool.pop() % (hi + 1)

    def _kernel_step(self, rs: RankState, j: int, si: int, st: Step, costs: dict[str, Any]) -> None:
        """One op chain on one rank: Python gap, nested cpu_ops, launches, compute kernels."""
        cfg = self.cfg
        plant = self.plant_by_key.get((rs.rank, j, st.layer, st.block)) if st.block else None
        rs.cpu_t += costs["py_gap"] + self._jitter(rs, 3)
        cause_t = rs.cpu_t
        if cfg.cpu_delay_rate and self.rng_delay.random() < cfg.cpu_delay_rate:
            delay = max(1, int(self.rng_delay.exponential(cfg.cpu_delay_mean_us)))
            record = {"rank": rs.rank, "iteration": j, "before_op": st.ops[0], "layer": st.layer,
                      "position": st.position, "delay_us": delay, "ts_true_us": rs.cpu_t, "gpu_idle_us": 0,
                      "collective": None, "_key": (rs.rank, j, si)}
            self.cpu_delays.append(record)
            closing = (rs.rank, j + 1 if st.trailing else j, st.position)
            self._pending_noise.setdefault(closing, []).append(record)
            rs.cpu_t += delay
        needed = 0
        if plant is not None and plant.kind != "slow_gemm":
            # CPU time the planted cause must add before the GPU starts to wait: the CPU's
            # lead over the GPU at the planted GEMM; the GPU then idles ``delay_us``.
            free0 = max(rs.compute_ready, rs.dep) + self._gaps_list[st.position][st.kidx[0]]
            planned = rs.cpu_t + sum(costs["pre"]) + costs["launch"][0] + LAUNCH_LATENCY_US
            needed = max(0, free0 - planned)
            if plant.kind == "python_gap":
                rs.cpu_t += needed + plant.delay_us
            elif plant.kind == "blocking_sync":
                self._blocking_sync(rs, plant.delay_us)
        opens = []
        pre = costs["pre"]
        for lvl, name in enumerate(st.ops):
            opens.append((name, rs.cpu_t))
            rs.cpu_t += pre[lvl]
        ext_parent = rs.ext + len(st.ops)   # the innermost op's External id (modern links launches to it)
        row = j + 1 if st.trailing else j
        durs = self._durations_list[st.position][row][rs.rank]
        gaps = self._gaps_list[st.position]
        between = costs["between"]
        for k, role in enumerate(st.roles):
            spec = self.kernels[role]
            launch = costs["launch"][k]
            if plant is not None and plant.kind == "cpu_launch_delay" and k == 0:
                launch += needed + plant.delay_us
            l0 = rs.cpu_t
            l1 = l0 + launch
            if len(rs.starts) >= cfg.launch_queue_depth:
                l1 = max(l1, rs.starts[0] + 1)
            n = st.kidx[k]
            dur = durs[n]
            span_key = (rs.rank, row, st.position)
            free = max(rs.compute_ready, rs.dep) + gaps[n]
            start = max(free, l1 + LAUNCH_LATENCY_US)
            idle = start - free
            if idle > 0:
                self._kernel_idle[(rs.rank, j, si)] = self._kernel_idle.get((rs.rank, j, si), 0) + idle
            rs.dep = 0
            end = start + dur
            if n == 0:
                self._span_start[span_key] = start
            if n == self._block_len[st.position] - 1:
                self._span_end[span_key] = end
            rs.compute_ready = end
            rs.starts.append(start)
            if len(rs.starts) > cfg.launch_queue_depth:
                rs.starts.popleft()
            corr = self._runtime(rs, spec.launch_api, l0, l1, ext_parent)
            self._gpu_event(rs, spec, COMPUTE_STREAM, start, end, corr, ext_parent, l0)
            rs.cpu_t = l1 + between
            if plant is not None and k == 0:
                record = {**dataclasses.asdict(plant), "event": self._plant_event_name(plant, spec, st),
                          "gpu_delay_us": plant.delay_us if plant.kind == "slow_gemm" else idle,
                          "cpu_extra_us": plant.delay_us + needed if plant.kind in ("python_gap", "cpu_launch_delay") else None,
                          "position": st.position, "cause_true_us": cause_t, "kernel_start_true_us": start,
                          "collective": None}
                self.plant_records.append(record)
                self._pending_cause[(rs.rank, j, st.position)] = record
        closes = []
        post = costs["post"]
        for lvl in reversed(range(len(st.ops))):
            rs.cpu_t += post[lvl] + self._jitter(rs, 2)
            closes.append(rs.cpu_t)
        closes.reverse()
        for (name, t0), t1 in zip(opens, closes, strict=True):
            self._cpu_event(rs, "cpu_op", name, t0, t1, self._op_args(name))

    def _plant_event_name(self, plant: Any, spec: KernelSpec, st: Step) -> str:
        if plant.kind == "slow_gemm":
            return spec.name
        if plant.kind == "cpu_launch_delay":
            return spec.launch_api
        if plant.kind == "blocking_sync":
            return "cudaDeviceSynchronize"
        return f"python gap before {st.ops[0]}"

    def _op_args(self, name: str) -> dict[str, Any]:
        """Shape arguments of a cpu_op, as ``record_shapes=True`` writes them (cached per name)."""
        cached = self._op_args_cache.get(name)
        if cached is None:
            cached = self._op_args_cache[name] = self._make_op_args(name)
        return cached

    def _make_op_args(self, name: str) -> dict[str, Any]:
        if name.startswith("aten::"):
            dt = "c10::BFloat16" if self.cfg.precision == "bf16" else "float"
            dims = [[self.cfg.tokens // SEQ_LEN or 1, min(SEQ_LEN, self.cfg.tokens), self.cfg.hidden]]
            if self.modern:
                return {"Input Dims": dims, "Input type": [dt], "Input Strides": [[min(SEQ_LEN, self.cfg.tokens) * self.cfg.hidden, self.cfg.hidden, 1]],
                        "Concrete Inputs": [""]}
            return {"Input Dims": dims, "Input type": [dt]}
        if name.startswith("autograd::engine"):
            return {"Sequence number": 1000, "Fwd thread id": 1}
        return {}

    def _blocking_sync(self, rs: RankState, delay_us: int) -> None:
        """A D2H copy of ``delay_us`` on a side stream, then ``cudaDeviceSynchronize``."""
        t0 = rs.cpu_t
        rs.cpu_t += 3
        l0 = rs.cpu_t
        l1 = l0 + 6
        corr = self._runtime(rs, "cudaMemcpyAsync", l0, l1, rs.ext + 3)
        m0 = l1 + LAUNCH_LATENCY_US
        drain = max(rs.compute_ready, rs.dep, *rs.stream_ready.values()) if rs.stream_ready else max(rs.compute_ready, rs.dep)
        m1 = max(m0, drain) + delay_us
        if rs.rank in self.write:
            rs.events.append({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pageable)",
                              "pid": rs.device, "tid": SIDE_STREAM, "ts": self._ts(rs, m0), "dur": self._dur(m1 - m0),
                              "args": {"External id": rs.ext + 3 if self.modern else corr, "device": rs.device, "context": 1,
                                       "stream": SIDE_STREAM, "correlation": corr, "bytes": int((m1 - m0) * 25_000),
                                       "memory bandwidth (GB/s)": 25.0}})
            rs.events.append({"ph": "s", "id": corr, "pid": rs.pid, "tid": rs.tid, "ts": self._ts(rs, l0), "cat": "ac2g", "name": "ac2g"})
            rs.events.append({"ph": "f", "id": corr, "pid": rs.device, "tid": SIDE_STREAM, "ts": self._ts(rs, m0),
                              "cat": "ac2g", "name": "ac2g", "bp": "e"})
        rs.cpu_t = l1 + 2
        for name in ("aten::to", "aten::_to_copy", "aten::copy_"):
            self._cpu_event(rs, "cpu_op", name, t0, rs.cpu_t, self._op_args(name))
        s0 = rs.cpu_t + 3
        s1 = max(s0 + 4, drain + 2, m1 + 2)
        corr = self._runtime(rs, "cudaDeviceSynchronize", s0, s1, rs.ext)
        self._sync_event(rs, "Context Sync", -1, s0 + 1, s1, corr)
        rs.cpu_t = s1 + 5

    def _item_sync(self, rs: RankState, costs: Any) -> None:
        """``loss.item()``: D2H copy on the compute stream and ``cudaStreamSynchronize``."""
        o0 = rs.cpu_t
        rs.cpu_t += int(costs[0])
        i0 = rs.cpu_t
        rs.cpu_t += int(costs[1])
        l0 = rs.cpu_t
        l1 = l0 + int(costs[2]) + 4
        corr = self._runtime(rs, "cudaMemcpyAsync", l0, l1, rs.ext + 2)
        m0 = max(rs.compute_ready + 2, l1 + LAUNCH_LATENCY_US)
        m1 = m0 + 2
        rs.compute_ready = m1
        if rs.rank in self.write:
            rs.events.append({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pageable)",
                              "pid": rs.device, "tid": COMPUTE_STREAM, "ts": self._ts(rs, m0), "dur": self._dur(2),
                              "args": {"External id": rs.ext + 2 if self.modern else corr, "device": rs.device, "context": 1,
                                       "stream": COMPUTE_STREAM, "correlation": corr, "bytes": 4,
                                       "memory bandwidth (GB/s)": 0.002}})
            rs.events.append({"ph": "s", "id": corr, "pid": rs.pid, "tid": rs.tid, "ts": self._ts(rs, l0), "cat": "ac2g", "name": "ac2g"})
            rs.events.append({"ph": "f", "id": corr, "pid": rs.device, "tid": COMPUTE_STREAM, "ts": self._ts(rs, m0),
                              "cat": "ac2g", "name": "ac2g", "bp": "e"})
        s0 = l1 + int(costs[3])
        s1 = max(s0 + 3, m1 + 2)
        scorr = self._runtime(rs, "cudaStreamSynchronize", s0, s1, rs.ext + 2)
        self._sync_event(rs, "Stream Sync", COMPUTE_STREAM, s0 + 1, s1, scorr)
        rs.cpu_t = s1 + int(costs[4])
        self._cpu_event(rs, "cpu_op", "aten::item", o0, rs.cpu_t + 2)
        self._cpu_event(rs, "cpu_op", "aten::_local_scalar_dense", i0, rs.cpu_t)
        rs.cpu_t += 2 + int(costs[5])

    # ---------------------------------------------------------------- collectives
    def _coll_launch(self, rs: RankState, st: Step, costs: Any) -> None:
        """CPU side of a collective on one rank; sets the rank's arrival (entry) time."""
        pg = self.group_of[(st.group_kind, rs.rank)]
        stream = {"tp": TP_STREAM, "fsdp": FSDP_STREAM, "ep": EP_STREAM}[st.group_kind]
        coll_name, annot, c10d = COLL_NAMES[st.coll]
        rs.cpu_t += int(costs[0]) + self._jitter(rs, 3)
        t_c10d = rs.cpu_t
        rs.cpu_t += int(costs[1]) if self.modern else 0
        t_rpc = rs.cpu_t
        rs.cpu_t += int(costs[2])
        t_ann = rs.cpu_t
        rs.cpu_t += int(costs[3])
        ext_rpc = rs.ext + (2 if self.modern else 1)
        e0 = rs.cpu_t
        rs.cpu_t += 3
        self._runtime(rs, "cudaEventRecord", e0, rs.cpu_t, ext_rpc)
        if st.after_compute:
            # the NCCL stream waits for the compute stream (the input is produced there)
            w0 = rs.cpu_t + 1
            rs.cpu_t = w0 + 2
            rs.event_id += 1
            wcorr = self._runtime(rs, "cudaStreamWaitEvent", w0, rs.cpu_t, ext_rpc)
            self._sync_event(rs, "Stream Wait Event", stream, w0 + 1, w0 + 1, wcorr,
                             {"wait_on_stream": COMPUTE_STREAM, "wait_on_cuda_event_record_corr_id": wcorr - 1,
                              "wait_on_cuda_event_id": rs.event_id})
        l0 = rs.cpu_t + int(costs[4])
        l1 = l0 + int(costs[5]) + 4
        corr = self._runtime(rs, "cudaLaunchKernel", l0, l1, ext_rpc)
        ready = max(rs.stream_ready.get(stream, 0), l1 + LAUNCH_LATENCY_US)
        if st.after_compute:
            ready = max(ready, rs.compute_ready + 2)
        rs.pending_entry = ready
        rs.pending_launch_ts = l0
        rs.pending_corr = corr
        rs.pending_ext = ext_rpc
        rs.cpu_t = l1 + int(costs[6])
        r0 = rs.cpu_t
        rs.cpu_t += 2
        self._runtime(rs, "cudaEventRecord", r0, rs.cpu_t, ext_rpc)
        rs.cpu_t += int(costs[7])
        t_ann_end = rs.cpu_t
        rs.cpu_t += int(costs[8])
        t_rpc_end = rs.cpu_t
        if st.waits:
            w0 = rs.cpu_t + int(costs[9])
            rs.cpu_t = w0 + 2
            rs.event_id += 1
            wc = self._runtime(rs, "cudaStreamWaitEvent", w0, rs.cpu_t, ext_rpc - 1 if self.modern else ext_rpc)
            self._sync_event(rs, "Stream Wait Event", COMPUTE_STREAM, w0 + 1, w0 + 1, wc,
                             {"wait_on_stream": stream, "wait_on_cuda_event_record_corr_id": corr + 1,
                              "wait_on_cuda_event_id": rs.event_id})
        rs.cpu_t += int(costs[10])
        n = pg["pg_size"]
        dt = TORCH_DTYPE[self.cfg.precision]
        if self.modern:
            self._cpu_event(rs, "cpu_op", c10d, t_c10d, rs.cpu_t, {})
            split = "[]" if st.coll != "alltoall" else "[" + ", ".join([str(st.nelems_in // n)] * n) + "]"
            ranks_s = "[" + ", ".join(str(r) for r in pg["ranks"]) + "]"
            stride = pg["ranks"][1] - pg["ranks"][0]
            rpc_args = {"Collective name": coll_name, "Process Group Description": pg["pg_desc"], "dtype": dt,
                        "Rank": rs.rank, "Input Dims": [[st.nelems_in]], "Input type": [f"c10::{dt}" if dt == "BFloat16" else "float"],
                        "Input Strides": [[1]], "Concrete Inputs": [""],
                        "In msg nelems": st.nelems_in, "Out msg nelems": st.nelems_out, "Group size": n,
                        "In split size": split, "Out split size": split, "Global rank start": pg["ranks"][0],
                        "Global rank stride": stride, "Process Group Name": pg["pg_name"],
                        "Process Group Ranks": ranks_s}
            self._cpu_event(rs, "cpu_op", "record_param_comms", t_rpc, t_rpc_end, rpc_args)
            # with record_shapes, today's torch gives the backend annotation the tensor's shape
            # arguments (seen on nccl:_all_gather_base in 2025 and on every gloo:* in torch 2.13)
            shape_args = {k: rpc_args[k] for k in ("Concrete Inputs", "Input type", "Input Strides", "Input Dims")}
            self._cpu_event(rs, "user_annotation", annot, t_ann, t_ann_end, shape_args)
        else:
            self._cpu_event(rs, "cpu_op", "record_param_comms", t_rpc, t_rpc_end,
                            {"Input Dims": [[st.nelems_in], [], [], []], "Input type": ["TensorList", "Scalar", "Scalar", "Scalar"]})
            self._cpu_event(rs, "user_annotation", annot, t_ann, t_ann_end,
                            {"Input Dims": [[st.nelems_in]], "Input type": ["c10::BFloat16" if dt == "BFloat16" else "float"]})

    def _transfer_us(self, st: Step, pg: dict[str, Any]) -> int:
        n = pg["pg_size"]
        eb = DTYPE_BYTES[self.cfg.precision]
        size = max(st.nelems_in, st.nelems_out) * eb
        factor = 2 * (n - 1) / n if st.coll == "allreduce" else (n - 1) / n
        hosts = {self.cfg.host_of(r) for r in pg["ranks"]}
        bw = self.spec["nvlink_gbps"] if len(hosts) == 1 else INTER_HOST_GBPS
        t = 8 + factor * size / (bw * 1e3)
        return max(2, int(round(t * (1 + 0.01 * self.rng_nccl.standard_normal()))))

    def _resolve(self, j: int, st: Step) -> None:
        """End every group's collective at max(entries) + transfer + jitter; record its truth."""
        seen: set[str] = set()
        dt = TORCH_DTYPE[self.cfg.precision]
        stream = {"tp": TP_STREAM, "fsdp": FSDP_STREAM, "ep": EP_STREAM}[st.group_kind]
        for pg in self.pgs:
            if pg["kind"] != st.group_kind or pg["pg_name"] in seen:
                continue
            seen.add(pg["pg_name"])
            members = [self.states[r] for r in pg["ranks"]]
            entries = [rs.pending_entry for rs in members]
            transfer = self._transfer_us(st, pg)
            latest = max(entries)
            ends = [latest + transfer + int(self.rng_nccl.integers(0, NCCL_JITTER_MAX_US + 1)) for _ in members]
            nbytes = max(st.nelems_in, st.nelems_out) * DTYPE_BYTES[self.cfg.precision]
            spec = nccl_kernel(st.coll, self.cfg.precision, nbytes, self.modern)
            index = self.pg_counter.get(pg["pg_name"], 0)
            self.pg_counter[pg["pg_name"]] = index + 1
            for rs, e0, e1 in zip(members, entries, ends, strict=True):
                rs.stream_ready[stream] = e1
                if st.waits:
                    rs.dep = max(rs.dep, e1)
                extra = None
                if self.modern:
                    n = pg["pg_size"]
                    split = "[]" if st.coll != "alltoall" else "[" + ", ".join([str(st.nelems_in // n)] * n) + "]"
                    extra = {"Collective name": COLL_NAMES[st.coll][0], "In msg nelems": st.nelems_in,
                             "Out msg nelems": st.nelems_out, "Group size": n, "dtype": dt,
                             "In split size": split, "Out split size": split, "Process Group Name": pg["pg_name"],
                             "Process Group Description": pg["pg_desc"],
                             "Process Group Ranks": "[" + ", ".join(str(r) for r in pg["ranks"]) + "]"}
                self._gpu_event(rs, spec, stream, e0, e1, rs.pending_corr, rs.pending_ext, rs.pending_launch_ts, extra)
            durs = [e1 - e0 for e0, e1 in zip(entries, ends, strict=True)]
            dmin = min(durs)
            fastest = [r for r, d in zip(pg["ranks"], durs, strict=True) if d == dmin]
            written_ends = [self._ts(rs, e) for rs, e in zip(members, ends, strict=True)]
            record: dict[str, Any] = {
                "pg": pg["pg_name"], "pg_desc": pg["pg_desc"], "group_kind": st.group_kind, "index": index,
                "iteration": j, "position": st.tp_index, "layer": st.layer, "collective": COLL_NAMES[st.coll][0],
                "kernel": spec.name, "in_nelems": st.nelems_in, "out_nelems": st.nelems_out, "bytes": nbytes,
                "dtype": dt, "ranks": list(pg["ranks"]), "transfer_us": transfer, "n_ranks": len(durs),
                "duration_us": {str(r): d for r, d in zip(pg["ranks"], durs, strict=True)},
                "straggler_rank": fastest[0], "straggler_tie": len(fastest) > 1,
                "tau_max_us": max(durs) - dmin,
                "tau_med_us": float(statistics.median(durs)) - dmin,
                "mean_delay_us": float(np.mean(durs)) - dmin,
                "end_spread_us": max(ends) - min(ends),
                "written_end_spread_us": max(written_ends) - min(written_ends),
                "planted_cause": None, "cpu_noise": []}
            if st.group_kind == "tp":
                self.tp_tau_max.append(record["tau_max_us"])
                where = {"pg": pg["pg_name"], "index": index}
                for r in pg["ranks"]:
                    cause = self._pending_cause.pop((r, j, st.tp_index), None)
                    if cause is not None:
                        cause["collective"] = where
                        record["planted_cause"] = {k: cause[k] for k in (
                            "kind", "rank", "iteration", "layer", "block", "event", "delay_us", "gpu_delay_us")}
                    for noise in self._pending_noise.pop((r, j, st.tp_index), []):
                        noise["collective"] = where
                        noise["gpu_idle_us"] = min(int(self._kernel_idle.get(noise["_key"], 0)), noise["delay_us"])
                        if noise["gpu_idle_us"]:
                            record["cpu_noise"].append({k: noise[k] for k in ("rank", "delay_us", "gpu_idle_us")})
            self.n_collectives += 1
            self.collective_sink(record)

    # ---------------------------------------------------------------- truth per block
    def _record_blocks(self, j: int) -> None:
        """Span of every compute block instance that ends in iteration ``j`` (busy times are in ``durations``)."""
        for p in range(self.n_tp):
            rows = self.design_rows[p]
            if not rows or not rows[0] <= j <= rows[-1]:
                continue
            for r in range(self.cfg.ranks):
                self.spans[p][j, r] = self._span_end.pop((r, j, p)) - self._span_start.pop((r, j, p))
        for stale in [k for k in self._span_start if k[1] <= j]:
            self._span_start.pop(stale)
            self._span_end.pop(stale, None)
