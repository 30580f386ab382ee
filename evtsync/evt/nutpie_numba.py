"""A PyMC model compiled for nutpie's numba backend, with C wrappers cached across processes.

``nutpie.compile_pymc_model(model, backend="numba")`` builds the logp+gradient and the
"expand" functions with PyTensor (whose compiled graphs numba already caches on disk), then
wraps each in a ``numba.cfunc`` that nutpie's Rust sampler calls. Those wrappers are closures
over the data arrays and fresh random keys, so numba compiles them again in every fit: 4-8 s
of the ~10 s a 250k-z-score fit spent compiling (issue 16), most of it LLVM re-optimising the
linked graph.

:func:`compile_numba_model` builds the same model object with the same wrappers written as
generated source whose only inputs are static (the model's dimensions, its shared variables'
ranks and dtypes, and deterministic keys); each wrapper is registered with PyTensor's numba
cache under a key that hashes that source, the PyTensor cache keys of the two graphs it calls,
and the nutpie and numba versions. A later fit of the same model structure loads the
compiled wrappers from disk (0.1 s). The functions are the same code as nutpie's: logp,
gradient and draws are bit-identical (``tests/evt/test_bayes_nutpie_numba.py``).

Anything this module does not recognise (another nutpie whose internals differ, a graph
PyTensor cannot cache, PyTensor's numba cache switched off) falls back to
``nutpie.compile_pymc_model`` itself, with a debug log line saying why.

Before the wrappers, nutpie's ``_make_functions`` builds the two PyTensor functions (log density
with gradient, and the draws' expansion) and PyTensor rewrites their graphs: 1-8 s of CPU per
fit (the hierarchical models' graphs the most; issue 30), paid again by every process, although
the numba code of the rewritten graphs is already cached. With a ``cache_key`` (the caller's
digest of everything the model's graph is built from: :func:`evtsync.evt.fit.compiled_model_key`),
:func:`compile_numba_model` keeps those two functions, rewritten, in the compiled-model cache
(``<cache>/models/KEY.pkl``, cloudpickle, :data:`MODEL_CACHE_KEEP` most recent entries): a later
fit of the same model on the same data loads them (their graphs already rewritten, their numba
code from PyTensor's cache) instead of building and rewriting them. The functions are the same
graphs, so log density, gradient and draws are bit-identical (``tests/evt/test_bayes_nutpie_numba.py``).
An entry that cannot be read is ignored (and replaced); the cache holds pickles, which run code
when loaded, and no other format holds compiled PyTensor functions, so an entry is loaded (or
written) only when it, its folder and every folder above belong to the user (or root, above)
and no one else can write them (:func:`evtsync.core.trust.unsafe_reason`); else a warning says
what to do and the model is compiled (docs/security.md).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

#: Bump when the wrapper template's meaning changes without its text changing.
WRAPPER_VERSION = 1
#: Bump when what the compiled-model cache stores changes.
MODEL_CACHE_FORMAT = 1
#: Entries of the compiled-model cache kept (the most recently used; 0.1-1.5 MB each).
MODEL_CACHE_KEEP = 64

_WRAPPERS = '''
def logp_wrapper(dim, x_, out_, logp_, user_data_):
    if dim != {n_dim}:
        return -1
    try:
        x = numba.carray(x_, ({n_dim},))
        out = numba.carray(out_, ({n_dim},))
        logp = numba.carray(logp_, ())
        ud = numba.carray(user_data_, (), RECORD)
{extract_logp}
        logp_val, grad = logp_inner(x{logp_args})
        logp[()] = logp_val
        out[...] = grad
        if not np.all(np.isfinite(out)):
            return 3
        if not np.isfinite(logp_val):
            return 4
    except Exception:
        return 1
    return 0


def expand_wrapper(dim, expanded, x_, out_, user_data_):
    if dim != {n_dim}:
        return -1
    if expanded != {n_expanded}:
        return -1
    try:
        x = numba.carray(x_, ({n_dim},))
        out = numba.carray(out_, ({n_expanded},))
        ud = numba.carray(user_data_, (), RECORD)
{extract_expand}
        (values,) = expand_inner(x{expand_args})
        out[...] = values
    except Exception:
        return -2
    return 0
'''
#: The fields nutpie's model object had when this module was written (0.16): any other set
#: means its internals changed, and nutpie's own compilation is used.
_MODEL_FIELDS = frozenset({
    "_n_dim", "dims", "_coords", "_shapes", "compiled_logp_func", "compiled_expand_func",
    "initial_point_func", "shared_data", "shared_var_keys", "user_data", "n_expanded", "shape_info",
    "logp_func", "expand_func", "reparameterized_names", "_transform_adapt_args"})


class _Unsupported(Exception):
    """This model or this nutpie cannot take the cached path (the message says why)."""


def compile_numba_model(model: Any, var_names: list[str], cache_key: str | None = None) -> Any:
    """``model`` compiled for nutpie's numba backend, as ``nutpie.compile_pymc_model(model,
    backend="numba", jitter_rvs=set(), var_names=var_names)`` compiles it, with the C wrappers
    loaded from the numba cache when a model of this structure was compiled before, and, with a
    ``cache_key`` that identifies the model's graph (its structure and data), its rewritten
    PyTensor functions loaded from the compiled-model cache when this model was compiled before."""
    import nutpie

    try:
        return _compile_cached(model, var_names, cache_key)
    except _Unsupported as exc:
        log.debug("nutpie wrappers not cached (%s): nutpie compiles them", exc)
    return nutpie.compile_pymc_model(model, backend="numba", jitter_rvs=set(), var_names=var_names)


def _extraction(keys: list[str], ranks: dict[str, tuple[int, str]]) -> tuple[str, str]:
    """Source lines taking each shared array out of nutpie's user-data record, and the
    argument list passing them on (nutpie's ``make_extraction_fn``, unrolled)."""
    lines, args = [], []
    for key in keys:
        ndim, dtype = ranks[key]
        name = f"d_{key}"
        lines.append(f"        {name} = numba.carray(address_as_void_pointer(ud['shared']['data']['{key}'][()]), "
                     f"int(ud['shared']['size']['{key}'][()]), np.{dtype})")
        shape = ", ".join(f"ud['shared']['shape']['{key}'][{i}]" for i in range(ndim))
        lines.append(f"        {name} = {name}.reshape(({shape}{',' if ndim else ''}))")
        args.append(name)
    return "\n".join(lines) or "        pass", "".join(f", {a}" for a in args)


def model_cache_folder() -> Path:
    """Where the compiled-model cache lives: ``<cache>/models`` (``$EVTSYNC_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/evtsync``, else ``~/.cache/evtsync``)."""
    from evtsync.trace.cache_dir import default_cache_dir

    return default_cache_dir() / "models"


def _entry_path(cache_key: str, var_names: list[str]) -> Path:
    import numba
    import nutpie
    import pymc
    import pytensor

    text = "\n".join([str(MODEL_CACHE_FORMAT), cache_key, *var_names, nutpie.__version__, pytensor.__version__,
                      pymc.__version__, numba.__version__, np.__version__,
                      str(pytensor.config.numba__fastmath), str(pytensor.config.floatX)])
    return model_cache_folder() / f"{hashlib.sha256(text.encode()).hexdigest()}.pkl"


def _cache_refused(path: Path) -> bool:
    """Whether the entry ``path`` (or its folder, or one above) could have been written by another
    user (:func:`evtsync.core.trust.unsafe_reason`): then it is neither loaded nor written, with a
    warning saying what to do. A pickle runs code when it is loaded."""
    from evtsync.core.trust import private_folder_problem, warn_once

    problem = private_folder_problem(path, "compiled models (pickles)")
    if problem is not None:
        warn_once(problem)
    return problem is not None


def _load_functions(path: Path) -> tuple | None:
    """The stored ``_make_functions`` results (without the initial-point function), or None
    (also when the entry is refused: :func:`_cache_refused`)."""
    import cloudpickle  # noqa: F401 - the pickles name cloudpickle's reconstructors

    if _cache_refused(path):
        return None
    try:
        with open(path, "rb") as fh:
            import pickle

            # a pickle runs code: only from a folder that is the user's alone (checked just above)
            stored = pickle.load(fh)  # noqa: S301
        os.utime(path)  # most recently used
    except FileNotFoundError:
        return None
    except Exception as exc:  # noqa: BLE001 - any unreadable entry is a miss, compiled and written again
        log.debug("compiled-model cache entry %s not usable (%s: %s): compiling", path, type(exc).__name__, exc)
        return None
    if not (isinstance(stored, tuple) and len(stored) == 2 and stored[0] == MODEL_CACHE_FORMAT):
        return None
    return stored[1]


def _store_functions(path: Path, functions: tuple) -> None:
    """Write the entry atomically, then keep the :data:`MODEL_CACHE_KEEP` most recent ones."""
    import cloudpickle

    if _cache_refused(path):
        return
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                cloudpickle.dump((MODEL_CACHE_FORMAT, functions), fh, protocol=5)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        entries = sorted(path.parent.glob("*.pkl"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in entries[MODEL_CACHE_KEEP:]:
            old.unlink(missing_ok=True)
    except Exception as exc:  # noqa: BLE001 - a cache that cannot be written costs time, never the fit
        log.debug("compiled-model cache entry %s not written (%s: %s)", path, type(exc).__name__, exc)


def _compile_cached(model: Any, var_names: list[str], cache_key: str | None = None) -> Any:
    import numba
    import nutpie
    import pytensor
    from pymc.initial_point import make_initial_point_fn

    try:
        from nutpie import compile_pymc as cp
        from pytensor.link.numba.cache import CACHED_SRC_FUNCTIONS, compile_numba_function_src

        fields = {f.name for f in dataclasses.fields(cp.CompiledPyMCModel)}
        helpers = (cp._make_functions, cp.make_user_data, cp.address_as_void_pointer,
                   cp._prepare_dims_and_coords, cp._wrap_with_lock, cp._rv_dict_to_flat_array_wrapper)
    except (ImportError, AttributeError) as exc:
        raise _Unsupported(f"nutpie {nutpie.__version__} or PyTensor lacks {exc}") from None
    if fields != _MODEL_FIELDS:
        raise _Unsupported(f"nutpie {nutpie.__version__}'s model fields differ")
    if not pytensor.config.numba__cache:
        raise _Unsupported("PyTensor's numba cache is off")
    make_functions, make_user_data, void_pointer, dims_and_coords, with_lock, flat_point_fn = helpers

    point_fn = with_lock(make_initial_point_fn(model=model, overrides=None, default_strategy="support_point",
                                               jitter_rvs=set(), return_transformed=True))
    entry = _entry_path(cache_key, var_names) if cache_key is not None else None
    stored = _load_functions(entry) if entry is not None else None
    if stored is not None:
        n_dim, n_expanded, logp_pt, expand_pt, shape_info, reparameterized = stored
        n_free = len(model.free_RVs)  # the free variables come first, as _make_functions joins them
        initial_point_fn = flat_point_fn(point_fn, names=list(shape_info[0][:n_free]),
                                         shapes=list(shape_info[2][:n_free]))
    else:
        n_dim, n_expanded, logp_pt, expand_pt, initial_point_fn, shape_info, reparameterized = make_functions(
            model, mode="NUMBA", compute_grad=True, join_expanded=True, pymc_initial_point_fn=point_fn,
            var_names=var_names)
        if entry is not None:
            _store_functions(entry, (n_dim, n_expanded, logp_pt, expand_pt, shape_info, reparameterized))
    logp_inner, expand_inner = logp_pt.vm.jit_fn, expand_pt.vm.jit_fn
    # a jit function without py_func is not one PyTensor cached (and None is no weak-ref key)
    found = [CACHED_SRC_FUNCTIONS.get(f.py_func) if hasattr(f, "py_func") else None
             for f in (logp_inner, expand_inner)]
    inner_keys = [k for k in found if k is not None]
    if len(inner_keys) < len(found):
        raise _Unsupported("PyTensor does not cache this model's graph")

    shared_data: dict[str, np.ndarray] = {}
    shared_var_keys: dict[Any, str] = {}
    for var in [*logp_pt.get_shared(), *expand_pt.get_shared()]:
        if var in shared_var_keys:
            continue
        key = f"s{len(shared_var_keys)}"  # nutpie draws random keys; these keep the source stable
        value = np.array(var.get_value(), order="C", copy=True)
        value.flags.writeable = False
        shared_data[key], shared_var_keys[var] = value, key
    user_data = make_user_data(shared_var_keys, shared_data)
    ranks = {key: (value.ndim, value.dtype.name) for key, value in shared_data.items()}
    extract_logp, logp_args = _extraction([shared_var_keys[v] for v in logp_pt.get_shared()], ranks)
    extract_expand, expand_args = _extraction([shared_var_keys[v] for v in expand_pt.get_shared()], ranks)
    source = _WRAPPERS.format(n_dim=n_dim, n_expanded=n_expanded, extract_logp=extract_logp,
                              logp_args=logp_args, extract_expand=extract_expand, expand_args=expand_args)
    digest = hashlib.sha256("\n".join([
        source, repr(user_data.dtype.descr), *inner_keys, nutpie.__version__, numba.__version__,
        str(WRAPPER_VERSION)]).encode()).hexdigest()

    env = {"__name__": __name__, "numba": numba, "np": np, "RECORD": user_data.dtype,
           "address_as_void_pointer": void_pointer, "logp_inner": logp_inner, "expand_inner": expand_inner}
    double_p = numba.types.CPointer(numba.types.double)
    signatures = {
        "logp_wrapper": numba.types.int64(numba.types.uint64, double_p, double_p, double_p, numba.types.voidptr),
        "expand_wrapper": numba.types.int64(numba.types.uint64, numba.types.uint64, double_p, double_p,
                                            numba.types.voidptr),
    }
    compiled = {}
    for name, signature in signatures.items():
        function = compile_numba_function_src(source, name, dict(env), cache_key=f"evtsync_{name}_{digest}")
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=numba.NumbaWarning)
            compiled[name] = numba.cfunc(signature, cache=True)(function)
    dims, coords = dims_and_coords(model, shape_info, reparameterized)
    return cp.CompiledPyMCModel(
        _n_dim=n_dim, dims=dims, _coords=coords,
        _shapes={name: tuple(shape) for name, _, shape in zip(*shape_info, strict=True)},
        compiled_logp_func=compiled["logp_wrapper"], compiled_expand_func=compiled["expand_wrapper"],
        initial_point_func=initial_point_fn, shared_data=shared_data, shared_var_keys=shared_var_keys,
        user_data=user_data, n_expanded=n_expanded, shape_info=shape_info, logp_func=logp_pt,
        expand_func=expand_pt, reparameterized_names=reparameterized)
