"""The fit file: a Bayesian fit's netCDF-4 file and the tree it holds, read and written.

One home for the format that :mod:`evtsync.evt.fit` writes and :class:`evtsync.evt.bayesfit.BayesFit`
wraps (the object re-exports every name here): the file name, the format version, the checksums
of its parts, loading with its checks, and the helpers that read a tree (convergence verdict,
per-cell parameters, parameter summary, spread priors, cell table). It imports neither the
sampler nor the object, so the sampler (``fit``) and the object (``bayesfit``, whose
:meth:`~evtsync.evt.bayesfit.BayesFit.fit` samples) both build on it without a loop.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from evtsync.core.defaults import INTERVAL_LEVEL, check_level
from evtsync.core.errors import FitError
from evtsync.core.tableio import atomic_path
from evtsync.core.trust import file_signature_problem, sign_file

if TYPE_CHECKING:
    import xarray as xr  # imported by the functions that use it (issue 48: import cost)

log = logging.getLogger(__name__)

FIT_FILE = "fit.nc"
#: Version of the fit file layout this code writes and reads.
FIT_FORMAT = 1
FORMAT_ATTR = "evtsync_fit_format"
#: Groups every fit file has.
REQUIRED_GROUPS = ("posterior", "sample_stats", "observed_data", "cells")
#: Names under which a posterior predictive check may be stored (the first present is used).
PPC_GROUPS = ("posterior_predictive_check", "ppc")
#: Root attributes that make up a fit's provenance.
PROVENANCE_KEYS = ("model_name", "model_family", "model_spec_path", "data_column", "input_path", "input_sha256", "seed",
                   "draws", "tune", "chains", "target_accept", "sampler", "command", "sampling_seconds",
                   "created", "package_versions")


# --------------------------------------------------------------------------- files

def fit_path(path: str | os.PathLike[str]) -> Path:
    """The netCDF file of a fit given as a folder (``fits/NAME``) or as the file itself."""
    p = Path(path)
    return p / FIT_FILE if p.is_dir() or not p.suffix else p


def require_netcdf_engine() -> None:
    """Fits are netCDF-4 files written with h5netcdf (a core dependency): a broken install is
    named before any sampling starts (``fit``, ``run``), never after the draws are made."""
    try:
        import h5netcdf  # noqa: F401
        import h5py  # noqa: F401
    except ImportError as exc:
        raise FitError(f"writing and reading fits needs h5netcdf and h5py, which evtsync requires "
                       f"({exc}): reinstall with pip install --force-reinstall evtsync") from exc


def save_fit(tree: xr.DataTree, out: str | os.PathLike[str]) -> Path:
    """Write the fit tree atomically to ``out/fit.nc`` (or to ``out`` if it names a .nc file).

    Parameters
    ----------
    tree : xarray.DataTree
        The fit (:func:`evtsync.fit_table`).
    out : path
        A folder (created if needed) or a ``.nc`` file name.

    Returns
    -------
    pathlib.Path
        The file written.

    Raises
    ------
    FitError
        The netCDF engine (h5netcdf) is not installed.
    """
    dest = fit_path(out)
    dest.parent.mkdir(parents=True, exist_ok=True)
    require_netcdf_engine()
    tree.attrs.setdefault(FORMAT_ATTR, FIT_FORMAT)
    tree.attrs.pop("fit_path", None)
    tree.attrs[CONTENT_ATTR] = content_sha256(tree)
    tree.attrs.pop(CHECKSUMS_ATTR, None)
    tree.attrs[CHECKSUMS_ATTR] = json.dumps(part_checksums(tree), sort_keys=True)
    with atomic_path(dest) as tmp:
        tree.to_netcdf(tmp, engine="h5netcdf")
        sign_file(dest, content=tmp)  # its signature: read back in process (read_netcdf_tree)
    return dest


#: Root attribute holding the sha256 of the posterior's values, written by :func:`save_fit`
#: and checked by :func:`load_fit`: a fit altered in place is refused, not used.
CONTENT_ATTR = "posterior_sha256"


def content_sha256(tree: xr.DataTree) -> str:
    """sha256 over the posterior's variables (names, shapes, dtypes and values, in name order)."""
    import hashlib

    digest = hashlib.sha256()
    post = tree["posterior"].to_dataset()
    for name in sorted(map(str, post.data_vars)):
        values = np.ascontiguousarray(post[name].values)
        digest.update(f"{name}|{values.shape}|{values.dtype.str}|".encode())
        digest.update(values.tobytes())
    return digest.hexdigest()


#: Root attribute holding, as JSON, the sha256 of every part of the fit (each root attribute,
#: ``attr:NAME``, and each group's variables and attributes, ``group:/PATH``): written by
#: :func:`save_fit`, checked by :func:`load_fit`, so that an edited ``converged`` flag or
#: diagnostic is refused by name like an edited draw (issue 33).
CHECKSUMS_ATTR = "evtsync_sha256"
#: Root attributes outside the checksums (the checksums themselves; where the file was read from).
_UNCHECKED_ATTRS = (CONTENT_ATTR, CHECKSUMS_ATTR, "fit_path")


def _plain(value: Any) -> Any:
    """An attribute or value as written and as read back alike (numpy scalars and arrays, which
    netCDF returns for Python numbers and lists, as Python ones; booleans as integers)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        return [_plain(v) for v in value.tolist()]
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


def _digest_text(value: Any) -> str:
    import hashlib

    return hashlib.sha256(json.dumps(_plain(value), sort_keys=True, default=str).encode()).hexdigest()


def _group_digest(node: xr.DataTree) -> str:
    """sha256 of one group's own variables (names, dims, values; numeric dtypes) and attributes."""
    import hashlib

    digest = hashlib.sha256()
    ds = node.to_dataset(inherit=False)
    for name in sorted(ds.variables, key=str):
        var = ds.variables[name]
        values = np.asarray(var.values)
        kind = values.dtype.kind
        digest.update(f"{name}|{var.dims}|{values.shape}|".encode())
        if kind in "OUS":  # text: object or fixed-width after a round trip, hash the strings
            digest.update("\x1f".join(map(str, values.ravel().tolist())).encode())
        else:
            digest.update(values.dtype.str.encode())
            digest.update(np.ascontiguousarray(values).tobytes())
        digest.update(_digest_text({str(k): v for k, v in var.attrs.items()}).encode())
    digest.update(_digest_text({str(k): v for k, v in node.attrs.items()}).encode())
    return digest.hexdigest()


def part_checksums(tree: xr.DataTree) -> dict[str, str]:
    """sha256 of every part of a fit: each root attribute and each group (see :data:`CHECKSUMS_ATTR`)."""
    parts = {f"attr:{k}": _digest_text(v) for k, v in tree.attrs.items() if k not in _UNCHECKED_ATTRS}
    for node in tree.subtree:
        if node is not tree:
            parts[f"group:{node.path}"] = _group_digest(node)
    return parts


def _check_parts(tree: xr.DataTree, source: Path, skipped: tuple[str, ...] = ()) -> None:
    """Refuse a fit whose attributes or groups differ from the checksums recorded when written
    (``skipped``: parts deliberately not read, e.g. ``group:/log_likelihood``, not checked)."""
    try:
        recorded = json.loads(str(tree.attrs[CHECKSUMS_ATTR]))
    except ValueError as exc:
        raise FitError(f"{source}: unreadable checksums ({CHECKSUMS_ATTR}): the file was altered; fit again") from exc
    if not isinstance(recorded, dict):
        raise FitError(f"{source}: unreadable checksums ({CHECKSUMS_ATTR}): the file was altered; fit again")
    recorded = {k: v for k, v in recorded.items() if k not in skipped}
    found = part_checksums(tree)
    differ = sorted(k for k in set(recorded) | set(found) if recorded.get(k) != found.get(k))
    if differ:
        named = ", ".join(("attribute " if k.startswith("attr:") else "group ") + repr(k.split(":", 1)[1])
                          for k in differ[:5]) + (f" and {len(differ) - 5} more" if len(differ) > 5 else "")
        raise FitError(f"{source}: {named} no longer match{'es' if len(differ) == 1 else ''} the checksum recorded "
                       f"when the fit was written ({CHECKSUMS_ATTR}): the file was altered after evtsync wrote it; "
                       "fit again")


def format_version(tree: xr.DataTree, source: str = "fit") -> int:
    """The layout version of a fit tree; ``FitError`` when newer than this code reads."""
    raw = tree.attrs.get(FORMAT_ATTR, 0)
    try:
        version = int(raw)
    except (TypeError, ValueError):
        raise FitError(f"{source}: unknown fit format {raw!r} (attribute {FORMAT_ATTR})") from None
    if version > FIT_FORMAT or version < 0:
        raise FitError(f"{source}: fit format {version} is newer than this evtsync reads (format {FIT_FORMAT}); "
                       "upgrade evtsync to read it")
    return version


def _read_tree(p: Path, skip: tuple[str, ...]) -> tuple[xr.DataTree, list[str]]:
    """The file's tree in memory, and the optional groups of ``skip`` it had (left out).

    A damaged file (a zeroed header, flipped bytes, a cut) makes h5py and h5netcdf raise
    anything (OSError, KeyError, RuntimeError, IndexError, ...): every one is a :class:`FitError`
    naming the file. The half-opened h5netcdf file then complains when it is collected (an
    "Exception ignored in" traceback on stderr): kept out of sight while the file is read."""
    import gc
    import sys

    import xarray as xr

    unraisable: list[Any] = []
    saved_hook = sys.unraisablehook
    sys.unraisablehook = unraisable.append
    problem = ""
    try:
        try:
            opened = xr.open_datatree(p, engine="h5netcdf")
            try:
                left_out = [g for g in skip if g not in REQUIRED_GROUPS and g in opened.children]
                for group in left_out:
                    del opened[group]  # dropped before load(): its variables are never read
                tree = opened.load()
            finally:
                opened.close()  # the data are in memory; the file may be replaced while the fit is used
        except Exception as exc:  # noqa: BLE001 - a damaged HDF5 file raises any type (see above)
            problem = f"{type(exc).__name__}: {exc}" if not isinstance(exc, OSError | ValueError) else str(exc)
        if problem:
            gc.collect()  # the half-opened file's complaint comes now, to the hook above
    finally:
        sys.unraisablehook = saved_hook
    if problem:
        log.debug("%s: %d complaint(s) of the netCDF library while closing a damaged file", p, len(unraisable))
        raise FitError(f"{p}: cannot read as a netCDF fit (damaged or not a fit file): {problem[:300]}")
    return tree, left_out


#: The environment variable that sets :func:`read_timeout_s`'s seconds (docs/user-guide.md).
READ_TIMEOUT_ENV = "EVTSYNC_FIT_READ_TIMEOUT"
#: Seconds a netCDF file without a valid signature may take to be read in a separate process,
#: plus :data:`READ_TIMEOUT_PER_MB_S` per MB of the file (:func:`read_timeout_s`).
READ_TIMEOUT_S = 60.0
READ_TIMEOUT_PER_MB_S = 1.0
#: The exit status of the reading process when the file was read and refused (a FitError).
_REFUSED = 3


def read_timeout_s(size_bytes: int) -> float:
    """The time limit of reading a file of ``size_bytes`` without a valid signature:
    ``$EVTSYNC_FIT_READ_TIMEOUT`` seconds when set (a positive number), else
    :data:`READ_TIMEOUT_S` + :data:`READ_TIMEOUT_PER_MB_S` per MB."""
    given = os.environ.get(READ_TIMEOUT_ENV, "").strip()
    if given:
        try:
            value = float(given)
        except ValueError:
            value = -1.0
        if not 0 < value < float("inf"):
            raise FitError(f"${READ_TIMEOUT_ENV}={given!r}: expected a positive number of seconds")
        return value
    return READ_TIMEOUT_S + READ_TIMEOUT_PER_MB_S * size_bytes / 1e6


def _read_in_child(p: Path, skip: tuple[str, ...], why: str) -> None:
    """Read ``p`` as :func:`_read_tree` does, in a separate Python process killed after
    :func:`read_timeout_s`: returns when it read the file (the same read in this process then
    ends too: libhdf5 is deterministic), raises the :class:`FitError` it met, or one saying that
    reading the HDF5 metadata did not finish. Bytes zeroed or flipped inside HDF5 metadata that
    no checksum covers (a global heap, an object header of version 1) can send libhdf5 into a
    loop that never returns and that no Python code interrupts (docs/security.md)."""
    import subprocess
    import sys

    limit = read_timeout_s(p.stat().st_size)
    code = "import sys; from evtsync.evt.fitfile import _child_main; sys.exit(_child_main(sys.argv[1:]))"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(entry for entry in sys.path if entry)}
    try:
        done = subprocess.run([sys.executable, "-c", code, str(p), *skip], capture_output=True, timeout=limit,
                              env=env, stdin=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired:  # run() has killed the process (SIGKILL) and reaped it
        raise FitError(f"{p}: reading the HDF5 metadata did not finish in {round(limit, 1):g} s: the file is damaged (libhdf5 "
                       f"loops on metadata that no checksum covers; read in a separate process because {why}); "
                       f"fit again, or raise ${READ_TIMEOUT_ENV} if the file is large and its storage slow") from None
    if done.returncode == 0:
        return
    said = done.stdout.decode("utf-8", "replace").strip()
    if done.returncode == _REFUSED and said:
        raise FitError(said.splitlines()[-1])
    tail = (done.stderr.decode("utf-8", "replace").strip().splitlines() or ["no message"])[-1]
    raise FitError(f"{p}: the process reading it ended with status {done.returncode} ({tail[:200]}): the file is "
                   "damaged, or evtsync's installation is")


def _child_main(argv: list[str]) -> int:
    """The reading process of :func:`_read_in_child`: ``argv`` is the file and the groups to skip;
    exit 0 when read, :data:`_REFUSED` with the FitError's line on stdout when refused."""
    import sys

    try:
        _read_tree(Path(argv[0]), tuple(argv[1:]))
    except FitError as exc:  # the one line the parent raises again (stdout is this process's answer)
        sys.stdout.write(str(exc).replace("\n", " ") + "\n")
        sys.stdout.flush()
        return _REFUSED
    return 0


#: The signature that starts an HDF5 superblock (HDF5 file format specification, "Format Signature").
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def hdf5_superblock_at(p: Path) -> int | None:
    """Where libhdf5 would find the file's superblock: the first of offsets 0, 512, 1024, 2048, ...
    holding :data:`HDF5_SIGNATURE` (the places the specification lets it be), or None when none
    does (then libhdf5 refuses the file before it parses any metadata: no need for a separate
    process, :func:`read_netcdf_tree`)."""
    try:
        size = p.stat().st_size
        with open(p, "rb") as fh:
            at = 0
            while at + len(HDF5_SIGNATURE) <= size:
                fh.seek(at)
                if fh.read(len(HDF5_SIGNATURE)) == HDF5_SIGNATURE:
                    return at
                at = 512 if at == 0 else at * 2
    except OSError:
        return None  # the read in this process names the error
    return None


def read_netcdf_tree(p: Path, skip: tuple[str, ...] = ()) -> tuple[xr.DataTree, list[str]]:
    """:func:`_read_tree` of a netCDF file given by a user (a fit, a rank-model fit), never
    hanging: in this process when its signature file shows that this user's evtsync wrote it
    and that it is unchanged (:func:`evtsync.core.trust.file_signature_problem`: one SHA-256 of
    the file, the normal path), else first in a separate process with a time limit
    (:func:`_read_in_child`: a second start of Python and a second read, for files written
    before signatures, by someone else, or copied without their ``.sig``). A file without an
    HDF5 superblock (:func:`hdf5_superblock_at`: text, a zeroed header) is refused by libhdf5
    before any metadata is parsed: read in this process."""
    why = file_signature_problem(p)
    if why is not None and hdf5_superblock_at(p) is not None:
        log.info("%s: %s: read first in a separate process, with a time limit", p, why)
        _read_in_child(p, skip, why)
    return _read_tree(p, skip)


def load_fit(path: str | os.PathLike[str], skip: tuple[str, ...] = ()) -> xr.DataTree:
    """Load a fit written by :func:`save_fit` into memory (the tree).

    Parameters
    ----------
    path : path
        A fit file (``fit.nc``) or the folder that holds it.
    skip : tuple of str, default ()
        Optional groups not read (e.g. ``("log_likelihood",)``: 112 MB in a demo fit, which
        :func:`evtsync.evt.compare.loo` recomputes and nothing else of a run reads): the tree
        lacks them, and their checksums are not checked (their bytes are not read). A required
        group (``posterior``, ``sample_stats``, ``observed_data``, ``cells``) is always read.

    Returns
    -------
    xarray.DataTree
        The fit tree.

    Raises
    ------
    FitError
        No such file, not a netCDF evtsync fit (group or attribute missing), a newer or unknown
        format version, or a posterior that no longer matches its recorded checksum.
    """
    p = fit_path(path)
    if not p.is_file():
        raise FitError(f"{p}: no such fit file (expected a folder written by `evtsync fit` or its {FIT_FILE})")
    require_netcdf_engine()
    tree, left_out = read_netcdf_tree(p, skip)
    for group in REQUIRED_GROUPS:
        if group not in tree.children:
            raise FitError(f"{p}: not an evtsync fit (group '{group}' missing)")
    for key in ("model_name", "converged"):
        if key not in tree.attrs:
            raise FitError(f"{p}: not an evtsync fit (attribute '{key}' missing)")
    format_version(tree, str(p))
    recorded = tree.attrs.get(CONTENT_ATTR)
    if recorded is not None and str(recorded) != content_sha256(tree):
        raise FitError(f"{p}: the posterior no longer matches the checksum recorded when the fit was written "
                       f"({CONTENT_ATTR}): the file was altered after `evtsync fit` wrote it; fit again")
    if CHECKSUMS_ATTR in tree.attrs:
        _check_parts(tree, p, skipped=tuple(f"group:/{g}" for g in left_out))
    tree.attrs["fit_path"] = str(p)
    return tree


# --------------------------------------------------------------------------- tree helpers

def is_converged(tree: xr.DataTree) -> bool:
    """The convergence verdict recorded in the fit."""
    return bool(int(tree.attrs.get("converged", 0)))


def convergence_note(tree: xr.DataTree) -> str:
    """Empty when converged, else a warning line naming the fit, for every output using it."""
    if is_converged(tree):
        return ""
    return f"WARNING: fit {tree.attrs.get('model_name', '?')} is NOT CONVERGED ({tree.attrs.get('convergence', '')})"


def cell_parameters(tree: xr.DataTree) -> xr.Dataset:
    """Per-cell ``mu``, ``sigma``, ``xi`` draws with dims (chain, draw, cell), pooled ones broadcast.

    ``cell`` carries the file's labels (``"H200|bf16"``); :meth:`BayesFit.cell_parameters`
    gives the same numbers with ``gpu``/``precision`` coordinates.
    """
    import xarray as xr
    post = tree["posterior"].to_dataset()
    cells = tree["cells"].to_dataset()
    template = xr.zeros_like(post["mu"].isel({d: 0 for d in post["mu"].dims if d not in ("chain", "draw")}, drop=True))
    cell_coord = xr.DataArray(np.zeros(cells.sizes["cell"]), dims="cell", coords={"cell": cells["cell"].values})
    out = {}
    for name in ("mu", "sigma", "xi"):
        da = post.get(name, template)
        if "cell" not in da.dims:
            da = da + cell_coord
        out[name] = da.transpose("chain", "draw", "cell")
    return xr.Dataset(out)


def _split_single_chain(tree: xr.DataTree) -> xr.DataTree:
    """With one chain, its two halves as two chains, so that (split) R-hat is defined."""
    import xarray as xr
    post = tree["posterior"].to_dataset()
    if post.sizes["chain"] > 1:
        return tree
    half = post.sizes["draw"] // 2
    first = post.isel(chain=[0], draw=slice(0, half))
    second = post.isel(chain=[0], draw=slice(half, 2 * half)).assign_coords(chain=[1], draw=first["draw"].values)
    return xr.DataTree.from_dict({"posterior": xr.concat([first, second], dim="chain")})


#: Root attribute of a fit: its LOO relative efficiency (:func:`relative_efficiency`), recorded
#: when the fit is made so that a comparison need not import ArviZ's stats (~1.8 s) to get it.
R_EFF_ATTR = "loo_r_eff"


def relative_efficiency(tree: xr.DataTree) -> float:
    """ArviZ's r_eff of PSIS-LOO: mean ESS (method "mean") over posterior quantities / number of draws.

    Parameters
    ----------
    tree : xarray.DataTree
        A fit tree (its ``posterior`` group).

    Returns
    -------
    float
        The relative efficiency (1.0 for a single chain).
    """
    post = tree["posterior"].to_dataset()
    n_samples = post.sizes["chain"] * post.sizes["draw"]
    if post.sizes["chain"] == 1:
        return 1.0
    import arviz_stats as az  # the stats alone: `arviz` also imports its plotting (matplotlib)

    ess = az.ess(tree, method="mean")
    vals = np.hstack([np.asarray(ess[v].values).ravel() for v in ess.data_vars])
    return float(np.mean(vals) / n_samples)


def parameter_summary(tree: xr.DataTree, level: float = INTERVAL_LEVEL) -> pd.DataFrame:
    """Mean, sd, central ``level`` interval (``lo``, ``hi``), R-hat and bulk/tail ESS of every posterior scalar."""
    import arviz_stats as az  # the stats alone: `arviz` also imports its plotting (matplotlib)

    post = tree["posterior"].to_dataset()
    rhat = az.rhat(_split_single_chain(tree))
    ess_bulk = az.ess(tree, method="bulk")
    ess_tail = az.ess(tree, method="tail")
    rows = []
    for name, da in post.data_vars.items():
        flat = da.stack(sample=("chain", "draw"))
        extra = [d for d in da.dims if d not in ("chain", "draw")]
        if extra:
            stacked = flat.stack(idx=extra)
            labels = [f"{name}[{'|'.join(map(str, k if isinstance(k, tuple) else (k,)))}]" for k in stacked["idx"].values]
            values = stacked.transpose("idx", "sample").values
            r = rhat[name].stack(idx=extra).values
            eb = ess_bulk[name].stack(idx=extra).values
            et = ess_tail[name].stack(idx=extra).values
        else:
            labels, values = [str(name)], flat.values[None, :]
            r, eb, et = [np.atleast_1d(x[name].values) for x in (rhat, ess_bulk, ess_tail)]
        for k, label in enumerate(labels):
            v = values[k]
            rows.append({
                "parameter": label, "mean": v.mean(), "sd": v.std(ddof=1),
                "lo": np.quantile(v, (1 - level) / 2), "hi": np.quantile(v, (1 + level) / 2), "level": level,
                "r_hat": float(r[k]), "ess_bulk": float(eb[k]), "ess_tail": float(et[k]),
            })
    return pd.DataFrame(rows)


#: A spread whose posterior interval is at least this share of its prior's is "prior-dominated":
#: the data narrowed it by less than half, so the prior, not the data, sets intervals that draw on it
#: (a new GPU or precision level's effect, methodology §7).
PRIOR_DOMINATED_RATIO = 0.5


def _spread_priors(tree: xr.DataTree) -> dict[str, Any]:
    """Each spread variable of a fit with the spec prior it was given (as the model chose it)."""
    from evtsync.evt.spec import parse_spec

    text = tree.attrs.get("model_spec_text")
    if not text:
        return {}
    spec = parse_spec(str(text), "fit")
    post = tree["posterior"]
    out: dict[str, Any] = {}
    if "mu_sd" in post and spec.mu.population_sd_prior is not None:
        out["mu_sd"] = spec.mu.population_sd_prior
    if "log_sigma_sd" in post and spec.sigma.population_sd_prior is not None:
        out["log_sigma_sd"] = spec.sigma.population_sd_prior
    for factor in spec.xi.factors:
        name = f"xi_sd_{factor}"
        if name in post and f"xi_delta_{factor}" in post:
            prior = spec.xi.spread_prior(int(post[f"xi_delta_{factor}"].sizes[factor]))
            if prior is not None:
                out[name] = prior
    if "xi_sd_cell" in post and spec.xi.cell_sd_prior is not None:
        out["xi_sd_cell"] = spec.xi.cell_sd_prior
    return out


def spread_prior_table(tree: xr.DataTree, level: float = INTERVAL_LEVEL) -> pd.DataFrame:
    """Prior against posterior for every spread of a hierarchical fit (issue 29, item 6).

    One row per spread (``mu_sd``, ``log_sigma_sd``, ``xi_sd_<factor>``, ``xi_sd_cell``): the
    prior (as the model chose it, e.g. the few-levels prior of a factor with 2 levels), its
    central ``level`` interval, the posterior's mean and interval, ``width_ratio`` = posterior
    width / prior width, and ``prior_dominated`` = width_ratio >= :data:`PRIOR_DOMINATED_RATIO`.
    Empty for a fit without spreads.
    """
    from evtsync.evt.model import _scipy_prior

    level = check_level(level)
    post = tree["posterior"].to_dataset()
    q = [(1 - level) / 2, (1 + level) / 2]
    rows = []
    for name, prior in _spread_priors(tree).items():
        v = post[name].values.ravel()
        p_lo, p_hi = (float(x) for x in _scipy_prior(prior).ppf(q))
        lo, hi = (float(x) for x in np.quantile(v, q))
        ratio = (hi - lo) / (p_hi - p_lo) if p_hi > p_lo else float("nan")
        rows.append({"parameter": name, "prior": prior.describe(), "prior_lo": p_lo, "prior_hi": p_hi,
                     "mean": float(v.mean()), "lo": lo, "hi": hi, "level": level, "width_ratio": ratio,
                     "prior_dominated": bool(ratio >= PRIOR_DOMINATED_RATIO)})
    return pd.DataFrame(rows, columns=["parameter", "prior", "prior_lo", "prior_hi", "mean", "lo", "hi", "level",
                                       "width_ratio", "prior_dominated"])


def cell_table(tree: xr.DataTree) -> pd.DataFrame:
    """One row per cell of a fit: ``cell`` label, its group columns, ``n_obs``."""
    cells = tree["cells"].to_dataset()
    out = pd.DataFrame({"cell": cells["cell"].values.astype(str)})
    for name, da in cells.data_vars.items():
        if name != "n_obs":
            out[name] = da.values.astype(str)
    out["n_obs"] = cells["n_obs"].values
    return out


def _group_index(cells: pd.DataFrame) -> pd.MultiIndex | None:
    groups = [c for c in cells.columns if c not in ("cell", "n_obs")]
    if not groups:
        return None
    return pd.MultiIndex.from_frame(cells[groups].astype(str))
