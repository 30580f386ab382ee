"""The layout of a synthetic trace set: a typed, validated configuration.

Everything the generator needs is here, so that the ground truth can record the exact
configuration that produced a trace set, and so that every mistake in it is reported as one
clear :class:`~evtsync.core.errors.InputError` before anything is written.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from evtsync.core.errors import InputError

GPUS_PER_HOST_DEFAULT = 8
#: The ground truth's file name in a synth output folder (evtsync.synth.truth writes it).
TRUTH_FILE = "ground_truth.json"

#: deviceProperties of real GPUs (field set and values copied from real Kineto traces where
#: one exists in ``data/traces``: V100, A100, H100, B200; H200 from its data sheet), plus the
#: dense peak throughput (TFLOP/s) and memory / NVLink bandwidths the kernel timings use.
GPU_MODELS: dict[str, dict[str, Any]] = {
    "V100": {
        "props": {
            "name": "Tesla V100-SXM2-32GB", "totalGlobalMem": 34079899648,
            "computeMajor": 7, "computeMinor": 0, "maxThreadsPerBlock": 1024,
            "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536, "warpSize": 32,
            "sharedMemPerBlock": 49152, "numSms": 80, "regsPerMultiprocessor": 65536,
            "sharedMemPerBlockOptin": 98304, "sharedMemPerMultiprocessor": 98304,
        },
        "tflops": {"fp32": 15.7, "bf16": None}, "mem_tbps": 0.9, "nvlink_gbps": 130.0,
        "arch": "volta",
    },
    "A100": {
        "props": {
            "name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 85031714816,
            "computeMajor": 8, "computeMinor": 0, "maxThreadsPerBlock": 1024,
            "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536, "warpSize": 32,
            "sharedMemPerBlock": 49152, "numSms": 108, "regsPerMultiprocessor": 65536,
            "sharedMemPerBlockOptin": 166912, "sharedMemPerMultiprocessor": 167936,
        },
        "tflops": {"fp32": 19.5, "bf16": 312.0}, "mem_tbps": 2.0, "nvlink_gbps": 230.0,
        "arch": "ampere",
    },
    "H100": {
        "props": {
            "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85018279936,
            "computeMajor": 9, "computeMinor": 0, "maxThreadsPerBlock": 1024,
            "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536, "warpSize": 32,
            "sharedMemPerBlock": 49152, "numSms": 132, "regsPerMultiprocessor": 65536,
            "sharedMemPerBlockOptin": 232448, "sharedMemPerMultiprocessor": 233472,
        },
        "tflops": {"fp32": 67.0, "bf16": 989.0}, "mem_tbps": 3.35, "nvlink_gbps": 360.0,
        "arch": "hopper",
    },
    "H200": {
        "props": {
            "name": "NVIDIA H200", "totalGlobalMem": 150754820096,
            "computeMajor": 9, "computeMinor": 0, "maxThreadsPerBlock": 1024,
            "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536, "warpSize": 32,
            "sharedMemPerBlock": 49152, "numSms": 132, "regsPerMultiprocessor": 65536,
            "sharedMemPerBlockOptin": 232448, "sharedMemPerMultiprocessor": 233472,
        },
        "tflops": {"fp32": 67.0, "bf16": 989.0}, "mem_tbps": 4.8, "nvlink_gbps": 360.0,
        "arch": "hopper",
    },
    "B200": {
        "props": {
            "name": "NVIDIA B200", "totalGlobalMem": 191503138816,
            "computeMajor": 10, "computeMinor": 0, "maxThreadsPerBlock": 1024,
            "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536, "warpSize": 32,
            "sharedMemPerBlock": 49152, "numSms": 148, "regsPerMultiprocessor": 65536,
            "sharedMemPerBlockOptin": 232448, "sharedMemPerMultiprocessor": 233472,
        },
        "tflops": {"fp32": 80.0, "bf16": 2250.0}, "mem_tbps": 8.0, "nvlink_gbps": 700.0,
        "arch": "blackwell",
    },
}

PRECISIONS = ("bf16", "fp32")

#: Default GEV(mu, sigma, xi) of the compute-block z-scores per GPU x precision (Coles'
#: convention). Chosen to span the three GEV families for the demo study: Frechet
#: (xi about 0.15, the paper's free fit), Gumbel (xi = 0) and Weibull (xi < 0).
#: The A100/H100/H200 x bf16/fp32 shapes are additive, xi = xi0 + delta_gpu + delta_precision
#: with xi0 = 0, delta_precision = +/-0.075 (bf16/fp32) and delta_gpu = -0.075 (A100) or
#: +0.075 (H100, H200), so that the demo study is one the hierarchical model
#: (models/gev-hier-gpu-precision.toml) can describe exactly: 0 (twice), 0.15 (twice),
#: -0.15 and 0 again.
DEFAULT_GEV: dict[tuple[str, str], tuple[float, float, float]] = {
    ("V100", "fp32"): (0.90, 0.30, 0.0),
    ("A100", "bf16"): (0.85, 0.30, 0.0),
    ("A100", "fp32"): (0.92, 0.27, -0.15),
    ("H100", "bf16"): (0.88, 0.30, 0.15),
    ("H100", "fp32"): (0.90, 0.28, 0.0),
    ("H200", "bf16"): (0.88, 0.30, 0.15),
    ("H200", "fp32"): (0.90, 0.28, 0.0),
    ("B200", "bf16"): (0.85, 0.32, 0.05),
    ("B200", "fp32"): (0.90, 0.28, 0.0),
}

PLANT_KINDS = ("slow_gemm", "cpu_launch_delay", "python_gap", "blocking_sync")
PLANT_BLOCKS = ("fwd-attn", "fwd-mlp", "bwd-mlp", "bwd-attn")
FORMATS = ("modern", "legacy")
#: Shapes of the drift over the job (``SynthConfig.drift_shape``): a straight line, or a half cosine
#: (flat at both ends, steepest mid-job); both span ``drift_sd`` from the first to the last iteration.
DRIFT_SHAPES = ("linear", "smooth")
#: Bounds on the departures from iid ranks, in units of b (cv·a): beyond any study's (issue 45's: a
#: shock of 1, a drift of 3, a slow rank of 1.5). A block time that still comes out <= 0 µs (a large
#: cv) stops the simulation with an error naming it.
MAX_SHOCK_SD, MAX_DRIFT_SD, MAX_SLOW_SD = 4.0, 4.0, 4.0
TP_MODES = ("allreduce", "rs_ag")


@dataclass(frozen=True)
class Plant:
    """One planted cause: ``kind`` on ``rank`` in ``iteration``, layer ``layer``, ``block``.

    The planted event is the block's first GEMM (its kernel for ``slow_gemm``, its launch for
    ``cpu_launch_delay``) or the CPU time just before that GEMM's op (``python_gap``,
    ``blocking_sync``). ``delay_us`` is the extra time put there.
    """

    kind: str
    rank: int
    iteration: int
    layer: int
    block: str
    delay_us: int

    @classmethod
    def parse(cls, text: str) -> Plant:
        """Parse ``KIND:RANK:ITERATION:LAYER:BLOCK:DELAY_US`` (the CLI's ``--plant``)."""
        parts = text.split(":")
        if len(parts) != 6:
            raise InputError(
                f"--plant {text!r}: expected KIND:RANK:ITERATION:LAYER:BLOCK:DELAY_US, "
                f"e.g. slow_gemm:3:5:1:fwd-mlp:2000"
            )
        kind, rank, iteration, layer, block, delay = parts
        try:
            return cls(kind, int(rank), int(iteration), int(layer), block, int(delay))
        except ValueError as exc:
            raise InputError(
                f"--plant {text!r}: RANK, ITERATION, LAYER and DELAY_US must be integers"
            ) from exc


def parse_slow_rank(text: str) -> tuple[int, float]:
    """Parse ``RANK:SD`` (the CLI's ``--slow-rank``): rank RANK persistently SD (units of b) slow."""
    parts = text.split(":")
    try:
        if len(parts) != 2:
            raise ValueError
        return int(parts[0]), float(parts[1])
    except ValueError:
        raise InputError(f"--slow-rank {text!r}: expected RANK:SD (an integer rank and its persistent shift in "
                         f"block sd b), e.g. 3:1.5") from None


def _groups_from_size(ranks: int, size: int, *, strided: bool, stride: int = 1) -> tuple[tuple[int, ...], ...]:
    """Partition ``range(ranks)`` into groups of ``size``: consecutive, or strided by ``stride``."""
    if not strided:
        return tuple(tuple(range(s, s + size)) for s in range(0, ranks, size))
    groups = []
    span = size * stride
    for base in range(0, ranks, span):
        for offset in range(stride):
            groups.append(tuple(base + offset + k * stride for k in range(size)))
    return tuple(groups)


@dataclass(frozen=True)
class SynthConfig:
    """Everything that defines a synthetic trace set; ``validate()`` checks it.

    Groups are explicit rank lists. :meth:`build` derives them from sizes: TP groups are
    consecutive ranks, FSDP groups take one rank per TP group (stride = TP size), EP
    groups are consecutive ranks.
    """

    ranks: int = 8
    tp_groups: tuple[tuple[int, ...], ...] = ((0, 1, 2, 3), (4, 5, 6, 7))
    fsdp_groups: tuple[tuple[int, ...], ...] = ()
    ep_groups: tuple[tuple[int, ...], ...] = ()
    tp_mode: str = "allreduce"
    iterations: int = 20
    layers: int = 2
    gpu: str = "H200"
    precision: str = "bf16"
    format: str = "modern"
    gzip: bool = False
    seed: int = 0
    gpus_per_host: int = GPUS_PER_HOST_DEFAULT
    clock_offsets_us: tuple[int, ...] = (0,)
    gev: tuple[float, float, float] | None = None
    #: None: block z-scores designed to follow ``gev`` (:mod:`evtsync.synth.noise`); a name of
    #: :data:`evtsync.synth.parents.PARENTS`: every rank's block time drawn iid from that parent.
    parent: str | None = None
    cv: float = 0.02
    #: Departures from iid ranks (issue 45; need ``parent``), all in units of b = cv·a: the sd of a
    #: Normal shock shared by every rank of one collective (one block instance of one iteration), the
    #: total range of a drift over the job (shape ``drift_shape``), and persistently slow ranks
    #: ``((rank, shift), ...)`` whose every time is ``shift`` later.
    shock_sd: float = 0.0
    drift_sd: float = 0.0
    drift_shape: str = "linear"
    slow_ranks: tuple[tuple[int, float], ...] = ()
    sample_size: int = 4
    plants: tuple[Plant, ...] = ()
    cpu_delay_rate: float = 0.002
    cpu_delay_mean_us: float = 100.0
    cuda_sync_events: bool = False
    launch_queue_depth: int = 16
    hidden: int = 8192
    ffn: int = 28672
    tokens: int = 32768
    first_step: int = 10
    write_ranks: tuple[int, ...] | None = None
    workload: str = "synthetic-llm"

    @classmethod
    def build(
        cls,
        *,
        ranks: int = 8,
        tp: int = 4,
        fsdp: int | None = None,
        ep: int | None = None,
        clock_offset_us: Sequence[float] | None = None,
        **kwargs: Any,
    ) -> SynthConfig:
        """A validated config from group sizes (``tp``, ``fsdp``, ``ep``) and other fields."""
        for name, value in (("ranks", ranks), ("tp", tp)):
            if not isinstance(value, int) or value < 1:
                raise InputError(f"synth: --{name} must be a positive integer, got {value!r}")
        if ranks % tp:
            raise InputError(f"synth: --tp {tp} does not divide --ranks {ranks}")
        tp_groups = _groups_from_size(ranks, tp, strided=False)
        fsdp_groups: tuple[tuple[int, ...], ...] = ()
        if fsdp:
            if fsdp < 2 or ranks % (fsdp * tp):
                raise InputError(
                    f"synth: --fsdp {fsdp} must be >= 2 with fsdp x tp ({fsdp * tp}) dividing "
                    f"--ranks {ranks}"
                )
            fsdp_groups = _groups_from_size(ranks, fsdp, strided=True, stride=tp)
        ep_groups: tuple[tuple[int, ...], ...] = ()
        if ep:
            if ep < 2 or ranks % ep:
                raise InputError(f"synth: --ep {ep} must be >= 2 and divide --ranks {ranks}")
            ep_groups = _groups_from_size(ranks, ep, strided=False)
        gpus_per_host = kwargs.get("gpus_per_host", GPUS_PER_HOST_DEFAULT)
        hosts = -(-ranks // gpus_per_host) if isinstance(gpus_per_host, int) and gpus_per_host > 0 else 1
        offsets: tuple[int, ...]
        if clock_offset_us is None:
            offsets = tuple(h * 250 for h in range(hosts))
        elif len(clock_offset_us) == 1:
            offsets = tuple(round(h * float(clock_offset_us[0])) for h in range(hosts))
        else:
            offsets = tuple(round(float(v)) for v in clock_offset_us)
        cfg = cls(ranks=ranks, tp_groups=tp_groups, fsdp_groups=fsdp_groups,
                  ep_groups=ep_groups, clock_offsets_us=offsets, **kwargs)
        cfg.validate()
        return cfg

    # ------------------------------------------------------------------ derived
    @property
    def hosts(self) -> int:
        """Number of hosts (``gpus_per_host`` GPUs each)."""
        return -(-self.ranks // self.gpus_per_host)

    @property
    def tp_size(self) -> int:
        """Size of every TP group."""
        return len(self.tp_groups[0])

    @property
    def gev_params(self) -> tuple[float, float, float]:
        """GEV(mu, sigma, xi) of the z-scores: the explicit one, else the GPU x precision default."""
        if self.gev is not None:
            return tuple(float(v) for v in self.gev)  # type: ignore[return-value]
        return DEFAULT_GEV[(self.gpu, self.precision)]

    def host_of(self, rank: int) -> int:
        """Host index of ``rank``."""
        return rank // self.gpus_per_host

    def ranks_to_write(self) -> tuple[int, ...]:
        """Ranks whose trace file is written (all by default)."""
        return tuple(range(self.ranks)) if self.write_ranks is None else self.write_ranks

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (recorded in the ground truth)."""
        out = dataclasses.asdict(self)
        out["plants"] = [dataclasses.asdict(p) for p in self.plants]
        out["gev"] = list(self.gev_params)
        out["slow_ranks"] = [[r, sd] for r, sd in self.slow_ranks]
        return out

    # ------------------------------------------------------------------ checks
    def validate(self) -> None:
        """Raise :class:`InputError` naming the first thing that is wrong."""
        def bad(msg: str) -> None:
            raise InputError(f"synth: {msg}")

        if not isinstance(self.ranks, int) or self.ranks < 1:
            bad(f"ranks must be a positive integer, got {self.ranks!r}")
        if self.gpu not in GPU_MODELS:
            bad(f"unknown GPU model {self.gpu!r}; expected one of {', '.join(GPU_MODELS)}")
        if self.precision not in PRECISIONS:
            bad(f"unknown precision {self.precision!r}; expected one of {', '.join(PRECISIONS)}")
        if GPU_MODELS[self.gpu]["tflops"][self.precision] is None:
            bad(f"{self.gpu} has no {self.precision} tensor cores; use fp32")
        if self.format not in FORMATS:
            bad(f"unknown format {self.format!r}; expected modern or legacy")
        if self.tp_mode not in TP_MODES:
            bad(f"unknown tp_mode {self.tp_mode!r}; expected one of {', '.join(TP_MODES)}")
        if not isinstance(self.iterations, int) or self.iterations < 1:
            bad(f"iterations must be >= 1, got {self.iterations!r}")
        if not isinstance(self.layers, int) or self.layers < 1:
            bad(f"layers must be >= 1, got {self.layers!r}")
        if not isinstance(self.gpus_per_host, int) or self.gpus_per_host < 1:
            bad(f"gpus_per_host must be >= 1, got {self.gpus_per_host!r}")
        for kind, groups in (("TP", self.tp_groups), ("FSDP", self.fsdp_groups), ("EP", self.ep_groups)):
            if kind == "TP" or groups:
                self._check_partition(kind, groups)
        if len({len(g) for g in self.tp_groups}) != 1:
            bad("all TP groups must have the same size")
        m = self.sample_size
        if not isinstance(m, int) or m < 3:
            bad(f"sample size m must be >= 3 (with m = 2 the pooled z-scores are forced to "
                f"mean square 1/2 and cannot follow a GEV), got {m!r}")
        if self.tp_size % m:
            bad(f"TP group size {self.tp_size} is not a multiple of the sample size m={m} "
                f"(a TP group of n ranks is split into n/m samples of m)")
        if len(self.clock_offsets_us) != self.hosts:
            bad(f"{len(self.clock_offsets_us)} clock offsets given for {self.hosts} hosts; give one per host "
                f"or a single step")
        if self.parent is not None:
            from evtsync.synth.parents import PARENTS

            if self.parent not in PARENTS:
                bad(f"unknown parent {self.parent!r}; expected one of {', '.join(PARENTS)}")
        self._check_departures(bad)
        mu, sigma, xi = self.gev_params
        if not sigma > 0:
            bad(f"GEV sigma must be > 0, got {sigma}")
        if not -1.0 < xi < 0.5:
            bad(f"GEV xi must be in (-1, 0.5) so that z has a finite variance, got {xi}")
        if xi < 0 and mu + sigma / -xi <= 0:
            bad(f"GEV({mu}, {sigma}, {xi}) has its upper end point <= 0: no positive z-scores")
        if not 0 < self.cv <= 0.2:
            bad(f"cv must be in (0, 0.2], got {self.cv}")
        if not 0 <= self.cpu_delay_rate <= 0.2:
            bad(f"cpu_delay_rate must be in [0, 0.2], got {self.cpu_delay_rate}")
        if not self.cpu_delay_mean_us > 0:
            bad(f"cpu_delay_mean_us must be > 0, got {self.cpu_delay_mean_us}")
        if not isinstance(self.launch_queue_depth, int) or self.launch_queue_depth < 2:
            bad(f"launch_queue_depth must be an integer >= 2, got {self.launch_queue_depth!r}")
        for name in ("hidden", "ffn", "tokens"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 64:
                bad(f"{name} must be an integer >= 64, got {value!r}")
        if self.hidden % self.tp_size or self.ffn % self.tp_size:
            bad(f"hidden {self.hidden} and ffn {self.ffn} must be divisible by the TP size {self.tp_size}")
        if self.write_ranks is not None:
            for r in self.write_ranks:
                if not 0 <= r < self.ranks:
                    bad(f"rank {r} to write is outside 0..{self.ranks - 1}")
        for p in self.plants:
            where = f"plant {p.kind}:{p.rank}:{p.iteration}:{p.layer}:{p.block}:{p.delay_us}"
            if p.kind not in PLANT_KINDS:
                bad(f"{where}: unknown kind; expected one of {', '.join(PLANT_KINDS)}")
            if not 0 <= p.rank < self.ranks:
                bad(f"{where}: rank outside 0..{self.ranks - 1}")
            if not 0 <= p.iteration < self.iterations:
                bad(f"{where}: iteration outside 0..{self.iterations - 1}")
            if not 0 <= p.layer < self.layers:
                bad(f"{where}: layer outside 0..{self.layers - 1}")
            if p.block not in PLANT_BLOCKS:
                bad(f"{where}: block must be one of {', '.join(PLANT_BLOCKS)}")
            if not 0 < p.delay_us <= 10_000_000:
                bad(f"{where}: delay_us must be in 1..10000000")
        keys = [(p.rank, p.iteration, p.layer, p.block) for p in self.plants]
        if len(keys) != len(set(keys)):
            bad("two plants target the same rank, iteration, layer and block")

    def _check_departures(self, bad: Any) -> None:
        """The shock, drift and slow ranks: finite, in range, on simulated ranks only."""
        import math

        for name, value, top in (("shock_sd", self.shock_sd, MAX_SHOCK_SD), ("drift_sd", self.drift_sd, MAX_DRIFT_SD)):
            if not isinstance(value, (int, float)) or not math.isfinite(value) or not 0 <= value <= top:
                bad(f"{name} must be a number in [0, {top:g}] (units of the block sd b), got {value!r}")
        if self.drift_shape not in DRIFT_SHAPES:
            bad(f"unknown drift_shape {self.drift_shape!r}; expected one of {', '.join(DRIFT_SHAPES)}")
        seen: set[int] = set()
        for item in self.slow_ranks:
            if not (isinstance(item, tuple) and len(item) == 2):
                bad(f"slow rank {item!r}: expected (rank, sd)")
            r, sd = item
            if not isinstance(r, int) or not 0 <= r < self.ranks:
                bad(f"slow rank {r!r}: rank outside 0..{self.ranks - 1}")
            if r in seen:
                bad(f"slow rank {r} given twice")
            seen.add(r)
            if not isinstance(sd, (int, float)) or not math.isfinite(sd) or sd == 0 or abs(sd) > MAX_SLOW_SD:
                bad(f"slow rank {r}: its shift must be a non-zero number in [-{MAX_SLOW_SD:g}, {MAX_SLOW_SD:g}] "
                    f"(units of the block sd b), got {sd!r}")
        if self.parent is None and (self.shock_sd or self.drift_sd or self.slow_ranks):
            bad("a shock, drift or slow rank acts on simulated rank times: give a parent (--parent), the GEV "
                "design has none")

    def _check_partition(self, kind: str, groups: tuple[tuple[int, ...], ...]) -> None:
        seen: set[int] = set()
        for g in groups:
            if len(g) < 2:
                raise InputError(f"synth: {kind} group {list(g)} has fewer than 2 ranks")
            for r in g:
                if not isinstance(r, int) or not 0 <= r < self.ranks:
                    raise InputError(f"synth: {kind} group {list(g)} names rank {r!r} outside 0..{self.ranks - 1}")
                if r in seen:
                    raise InputError(f"synth: rank {r} is in two {kind} groups")
                seen.add(r)
        if seen != set(range(self.ranks)):
            missing = sorted(set(range(self.ranks)) - seen)
            raise InputError(f"synth: {kind} groups leave ranks {missing} out")
