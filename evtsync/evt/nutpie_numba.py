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
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import warnings
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

#: Bump when the wrapper template's meaning changes without its text changing.
WRAPPER_VERSION = 1

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


def compile_numba_model(model: Any, var_names: list[str]) -> Any:
    """``model`` compiled for nutpie's numba backend, as ``nutpie.compile_pymc_model(model,
    backend="numba", jitter_rvs=set(), var_names=var_names)`` compiles it, with the C wrappers
    loaded from the numba cache when a model of this structure was compiled before."""
    import nutpie

    try:
        return _compile_cached(model, var_names)
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


def _compile_cached(model: Any, var_names: list[str]) -> Any:
    import numba
    import nutpie
    import pytensor
    from pymc.initial_point import make_initial_point_fn

    try:
        from nutpie import compile_pymc as cp
        from pytensor.link.numba.cache import CACHED_SRC_FUNCTIONS, compile_numba_function_src

        fields = {f.name for f in dataclasses.fields(cp.CompiledPyMCModel)}
        helpers = (cp._make_functions, cp.make_user_data, cp.address_as_void_pointer,
                   cp._prepare_dims_and_coords, cp._wrap_with_lock)
    except (ImportError, AttributeError) as exc:
        raise _Unsupported(f"nutpie {nutpie.__version__} or PyTensor lacks {exc}") from None
    if fields != _MODEL_FIELDS:
        raise _Unsupported(f"nutpie {nutpie.__version__}'s model fields differ")
    if not pytensor.config.numba__cache:
        raise _Unsupported("PyTensor's numba cache is off")
    make_functions, make_user_data, void_pointer, dims_and_coords, with_lock = helpers

    point_fn = with_lock(make_initial_point_fn(model=model, overrides=None, default_strategy="support_point",
                                               jitter_rvs=set(), return_transformed=True))
    n_dim, n_expanded, logp_pt, expand_pt, initial_point_fn, shape_info, reparameterized = make_functions(
        model, mode="NUMBA", compute_grad=True, join_expanded=True, pymc_initial_point_fn=point_fn,
        var_names=var_names)
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
