"""The augmented Hockney model of a collective and the optimal bandwidth B* (methodology §8).

    T(B) = p·alpha + q·S/B + tau

with ``p`` latency steps of ``alpha`` µs, ``q·S`` bytes crossing each link at bandwidth ``B``, and
the synchronization tax ``tau`` µs (zero in Hockney's original model). The elasticity of T in B
is ``eps_B = -(q S/B)/T`` in (-1, 0); the bandwidth with a target elasticity ``eps`` is

    B*(eps) = q·S·(1 + eps) / (-eps · (p·alpha + tau)),

Hockney's ``B*_H`` is the same with tau = 0, and ``1 - B*/B*_H = tau/(p·alpha + tau)``.

Units, everywhere in this module: ``alpha`` and ``tau`` in µs, ``S`` in bytes, bandwidth in
bytes per second (SI: 1 GB/s = 1e9 bytes/s), times in µs. Every function broadcasts over its
arguments, so ``tau`` may be an array of posterior draws (e.g. ``(chain, draw, n)``) against
the matching ``p, q`` of a vector of domain sizes.

Topologies (bandwidth-optimal AllReduce for large buffers, as in the paper):

==========  ====================  ====================  ============
name        algorithm             p                     q
==========  ====================  ====================  ============
ring        ring AllReduce        2(n - 1)              2(n - 1)/n
torus3d     3D bucket             6(n^(1/3) - 1)        2(n - 1)/n
full        2-phase all-pairs     2                     2(n - 1)/n
==========  ====================  ====================  ============

For the 3D torus a domain size that is not a perfect cube uses the real cube root (an
idealised torus); the paper evaluates cubes (n = 512 = 8³).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from evtsync.core.defaults import DEFAULT_EPS
from evtsync.core.errors import InputError

__all__ = [
    "TOPOLOGIES",
    "Topology",
    "bandwidth_reduction",
    "comm_time_us",
    "elasticity",
    "flops_scaled_bandwidth",
    "get_topology",
    "hockney_bandwidth",
    "optimal_bandwidth",
]

US_PER_S = 1e6

Array = NDArray[np.float64]


def _out(value: Array) -> Array:
    value = np.asarray(value)
    return value[()] if value.ndim == 0 else value


def _check_n(n: ArrayLike) -> Array:
    n_a = np.asarray(n, dtype=float)
    if np.any(~np.isfinite(n_a)) or np.any(n_a < 2) or np.any(n_a != np.round(n_a)):
        raise InputError("domain size n must be an integer >= 2")
    return n_a


def _q_allreduce(n: Array) -> Array:
    return 2.0 * (n - 1.0) / n


@dataclass(frozen=True)
class Topology:
    """A scale-up topology with the latency steps p(n) and bandwidth factor q(n) of its algorithm."""

    name: str
    label: str
    algorithm: str
    p_of_n: Callable[[Array], Array]
    q_of_n: Callable[[Array], Array]

    def p(self, n: ArrayLike) -> Array:
        """Number of latency steps p for domain size(s) n."""
        n_a = _check_n(n)
        return _out(np.broadcast_to(self.p_of_n(n_a), n_a.shape).astype(float))

    def q(self, n: ArrayLike) -> Array:
        """Bandwidth factor q for domain size(s) n."""
        return _out(self.q_of_n(_check_n(n)))

    def latency_steps(self, n: ArrayLike, phases: float = 2.0) -> Array:
        """Latency steps of an algorithm with ``phases`` phases (2 for AllReduce = reduce-scatter +
        all-gather, whose count :meth:`p` gives; 1 for ReduceScatter, AllGather, ...)."""
        return _out(np.asarray(self.p(n), dtype=float) * (phases / 2.0))


TOPOLOGIES: dict[str, Topology] = {
    "ring": Topology("ring", "Ring", "ring AllReduce", lambda n: 2.0 * (n - 1.0), _q_allreduce),
    "torus3d": Topology(
        "torus3d", "3D torus", "3D bucket", lambda n: 6.0 * (np.cbrt(n) - 1.0), _q_allreduce
    ),
    "full": Topology(
        "full", "Fully connected", "2-phase all-pairs", lambda n: np.full_like(n, 2.0), _q_allreduce
    ),
}

#: Other names of the topologies (the bandwidth CLI's and nccl-tests' vocabularies alike).
_ALIASES = {
    "torus": "torus3d",
    "3dtorus": "torus3d",
    "torus-3d": "torus3d",
    "3d-torus": "torus3d",
    "3d_torus": "torus3d",
    "fully-connected": "full",
    "fully_connected": "full",
    "fullyconnected": "full",
    "fc": "full",
    "all-pairs": "full",
    "nvswitch": "full",
    "switch": "full",
}


def topology_label(name: str) -> str:
    """How a topology is written in prose ("fully connected", "ring", "3D torus"); an unknown
    name as given."""
    topology = TOPOLOGIES.get(_ALIASES.get(name, name)) if isinstance(name, str) else None
    if topology is None:
        return str(name)
    return topology.label if topology.label[:2].isupper() else topology.label.lower()


def get_topology(name: str) -> Topology:
    """Topology by name (ring, torus3d, full; aliases torus, fully-connected, nvswitch)."""
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    if key not in TOPOLOGIES:
        raise InputError(f"unknown topology {name!r}; expected one of {', '.join(TOPOLOGIES)}")
    return TOPOLOGIES[key]


def _check_eps(eps: ArrayLike) -> Array:
    eps_a = np.asarray(eps, dtype=float)
    if np.any(~((eps_a > -1) & (eps_a < 0))):
        raise InputError(f"target elasticity eps must lie in (-1, 0); got {eps_a.ravel()[:5].tolist()}")
    return eps_a


def comm_time_us(
    bandwidth: ArrayLike, size_bytes: ArrayLike, alpha_us: ArrayLike, tau_us: ArrayLike,
    p: ArrayLike, q: ArrayLike,
) -> Array:
    """T(B) = p·alpha + q·S/B + tau in µs (bandwidth in bytes/s)."""
    b = np.asarray(bandwidth, dtype=float)
    return _out(
        np.asarray(p) * np.asarray(alpha_us, dtype=float)
        + np.asarray(q) * np.asarray(size_bytes, dtype=float) / b * US_PER_S
        + np.asarray(tau_us, dtype=float)
    )


def elasticity(
    bandwidth: ArrayLike, size_bytes: ArrayLike, alpha_us: ArrayLike, tau_us: ArrayLike,
    p: ArrayLike, q: ArrayLike,
) -> Array:
    """eps_B = (dT/dB)(B/T) = -(q·S/B)/T, in (-1, 0)."""
    transfer = np.asarray(q) * np.asarray(size_bytes, dtype=float) / np.asarray(bandwidth, dtype=float) * US_PER_S
    return _out(-transfer / np.asarray(comm_time_us(bandwidth, size_bytes, alpha_us, tau_us, p, q)))


def optimal_bandwidth(
    size_bytes: ArrayLike, alpha_us: ArrayLike, tau_us: ArrayLike, p: ArrayLike, q: ArrayLike,
    eps: ArrayLike = DEFAULT_EPS,
) -> Array:
    """B*(eps) = q·S·(1 + eps) / (-eps·(p·alpha + tau)) in bytes/s; ``inf`` if p·alpha + tau = 0."""
    eps_a = _check_eps(eps)
    tau_a = np.asarray(tau_us, dtype=float)
    if np.any(tau_a < 0):
        raise InputError("synchronization tax tau must be >= 0 µs")
    floor_us = np.asarray(p) * np.asarray(alpha_us, dtype=float) + tau_a
    with np.errstate(divide="ignore"):
        value = (
            np.asarray(q) * np.asarray(size_bytes, dtype=float) * (1.0 + eps_a)
            / (-eps_a * floor_us) * US_PER_S
        )
    return _out(value)


def hockney_bandwidth(
    size_bytes: ArrayLike, alpha_us: ArrayLike, p: ArrayLike, q: ArrayLike, eps: ArrayLike = DEFAULT_EPS
) -> Array:
    """Hockney's B*_H: :func:`optimal_bandwidth` with tau = 0 (bytes/s)."""
    return optimal_bandwidth(size_bytes, alpha_us, 0.0, p, q, eps)


def bandwidth_reduction(alpha_us: ArrayLike, tau_us: ArrayLike, p: ArrayLike) -> Array:
    """1 - B*/B*_H = tau/(p·alpha + tau): the share of Hockney's bandwidth the tax makes useless."""
    tau_a = np.asarray(tau_us, dtype=float)
    with np.errstate(invalid="ignore"):
        return _out(tau_a / (np.asarray(p) * np.asarray(alpha_us, dtype=float) + tau_a))


def flops_scaled_bandwidth(
    size_bytes: ArrayLike, alpha_us: ArrayLike, tau_us: ArrayLike, p: ArrayLike, q: ArrayLike,
    factor: ArrayLike, eps: ArrayLike = DEFAULT_EPS,
) -> Array:
    """B* on a GPU ``factor`` times faster: the block time, and so tau = b·E_k, divide by f (§8).

    ``tau_us`` is the tax on the reference GPU; the buffer S and alpha are unchanged.
    """
    f = np.asarray(factor, dtype=float)
    if np.any(f <= 0):
        raise InputError("FLOPS factor f must be > 0")
    return optimal_bandwidth(size_bytes, alpha_us, np.asarray(tau_us, dtype=float) / f, p, q, eps)
