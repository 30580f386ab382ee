"""A wheel built from the repository works when installed (not editable) in a fresh venv.

The slow test builds the wheel, installs it with ``--no-deps`` into a new venv whose
dependencies come from the test's own environment, and runs ``evtsync models``, the demo
``evtsync run``, ``evtsync fit Z --model gev-hier-gpu-precision`` and ``evtsync tax`` of a folder of
NCCL Inspector logs (issue 48: without pandas or pyarrow imported) from a folder outside the
repository. Only the wheel's core dependencies (its ``Requires-Dist`` without extras, and
theirs, as pip would install them for ``pip install evtsync``) are linked into a folder on the
venv's ``.pth`` path, so nothing is downloaded and nothing an extra brings is importable:
``pip install evtsync`` alone must run every command with its defaults (issue 33).
The fast test checks that the specifications resolve through :mod:`importlib.resources`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODEL_NAMES = {"frechet", "gev", "gev-hier-gpu-precision", "gumbel", "gumbel-hier", "weibull"}


def test_models_resolve_through_importlib_resources() -> None:
    from importlib import resources

    from evtsync.evt.catalog import default_models_dir, list_models, resolve_model

    folder = default_models_dir()
    packaged = resources.files("evtsync") / "models"
    # a checkout reads the repository's top-level models/; an installed wheel its package data
    assert folder in (Path(str(packaged)), ROOT / "models")
    assert {p.stem for p in folder.glob("*.toml")} == {p.stem for p in (ROOT / "models").glob("*.toml")}
    assert {e.path.stem for e in list_models()} >= MODEL_NAMES
    assert resolve_model("gev-hier-gpu-precision") == folder / "gev-hier-gpu-precision.toml"
    described = {e.path.stem: e.description for e in list_models()}
    assert described["gumbel"].startswith("Pooled Gumbel")  # the file's own description key


def test_unknown_model_name_lists_the_available_ones(tmp_path: Path) -> None:
    from evtsync.core.errors import InputError
    from evtsync.evt.catalog import resolve_model

    with pytest.raises(InputError, match="available: .*gev-hier-gpu-precision"):
        resolve_model("no-such-model")
    with pytest.raises(InputError, match="no such model"):
        resolve_model("gumbel", folder=tmp_path)  # --models-dir overrides the shipped folder


def _core_requirements(wheel: Path) -> list[str]:
    """The wheel's ``Requires-Dist`` lines that no extra guards (what ``pip install evtsync`` installs)."""
    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        lines = zf.read(meta).decode().splitlines()
    return [line.split(":", 1)[1].strip() for line in lines
            if line.startswith("Requires-Dist:") and "extra ==" not in line]


def _link_dependency_closure(requirements: list[str], dest: Path) -> set[str]:
    """Symlink into ``dest`` every installed file tree of ``requirements`` and of their own
    requirements (markers evaluated; a dependency's extras followed only where a requirement
    names them, as pip does): a site folder holding what a plain ``pip install`` of those
    requirements would hold. The normalised names linked."""
    from importlib import metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    dest.mkdir(parents=True)
    purelib = Path(sysconfig.get_path("purelib"))
    todo, seen, done = [(Requirement(r), "") for r in requirements], set(), set()
    while todo:
        req, asked_by_extra = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": asked_by_extra}):
            continue
        name = canonicalize_name(req.name)
        extras = ("", *sorted(req.extras))
        if all((name, e) in done for e in extras):
            continue
        dist = metadata.distribution(req.name)  # a core dependency missing here fails the test
        if name not in seen:
            seen.add(name)
            for top in {Path(str(f)).parts[0] for f in dist.files or ()} - {"..", "__pycache__"}:
                if (purelib / top).exists() and not (dest / top).exists():
                    (dest / top).symlink_to(purelib / top)
        for extra in extras:
            if (name, extra) not in done:
                done.add((name, extra))
                todo += [(Requirement(r), extra) for r in dist.requires or ()]
    return seen


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{cmd} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.mark.slow
def test_built_wheel_runs_demo_and_fit_by_model_name(tmp_path: Path) -> None:
    import shutil

    # build from a copy of the tracked tree, so that no stale build/ folder of the checkout
    # can put modules into the wheel that the source no longer has
    src = tmp_path / "src"
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split()
    for rel in files:
        if (ROOT / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, src / rel)
    wheel_dir = tmp_path / "wheel"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheel_dir),
          str(src)], cwd=tmp_path, env=dict(os.environ))
    wheel = next(wheel_dir.glob("evtsync-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert {f"evtsync/models/{m}.toml" for m in MODEL_NAMES} <= set(names)
    assert "evtsync/models/rankmodel.toml" in names  # the rank model's specification (its priors, its sampler)
    assert not any("templates" in n for n in names)
    assert "evtsync/pipeline/engine.py" in names and "evtsync/plots/predictions.py" in names

    venv = tmp_path / "venv"
    base_python = getattr(sys, "_base_executable", sys.executable)
    _run([base_python, "-m", "venv", "--without-pip", str(venv)], cwd=tmp_path, env=dict(os.environ))
    vpy = venv / "bin" / "python"
    site = Path(subprocess.check_output([str(vpy), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                                        text=True).strip())
    # the dependencies: the core closure of this environment's packages, linked into a folder on
    # a plain .pth path (no extras: dask, pytest and the like are not importable there)
    core = _link_dependency_closure(_core_requirements(wheel), tmp_path / "core-deps")
    assert {"h5netcdf", "h5py", "nutpie"} <= core  # the fit file engine and the default sampler
    assert "dask" not in core and "pytest" not in core
    (site / "zz_test_deps.pth").write_text(str(tmp_path / "core-deps") + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    _run([sys.executable, "-m", "pip", "--python", str(vpy), "install", "--no-deps", "-q", str(wheel)],
         cwd=tmp_path, env=env)
    work = tmp_path / "elsewhere"
    work.mkdir()
    where = _run([str(vpy), "-c", "import evtsync; print(evtsync.__file__)"], cwd=work, env=env).stdout.strip()
    assert where.startswith(str(site)), where  # the installed copy, not the checkout

    evtsync = str(venv / "bin" / "evtsync")
    listing = _run([evtsync, "models"], cwd=work, env=env).stdout
    assert str(site / "evtsync" / "models") in listing
    for name in MODEL_NAMES:
        assert name in listing

    _run([evtsync, "-q", "run", "--out", "demo", "--draws", "300", "--tune", "300", "--model", "gumbel",
          "--model", "gev-hier-gpu-precision"], cwd=work, env=env, timeout=900)
    assert (work / "demo" / "report.html").is_file()
    missing = subprocess.run([str(vpy), "-c", "import dask"], cwd=work, env=env, capture_output=True)
    assert missing.returncode != 0  # the venv really lacks the extras
    sampler = _run([str(vpy), "-c", "from evtsync.evt.bayesfit import load_fit; import sys; "
                    "print(load_fit(sys.argv[1]).attrs['sampler'])", "demo/fits/gumbel.nc"],
                   cwd=work, env=env).stdout.strip()
    assert sampler == "nutpie"  # the default sampler, not PyMC's fallback
    spec = _run([str(vpy), "-c", "from evtsync.evt.rankmodel import load_rank_model; import sys; "
                 "print(load_rank_model(sys.argv[1]).attrs['model_spec'])", "demo/fits/rankmodel.nc"],
                cwd=work, env=env).stdout.strip()
    assert spec == str(site / "evtsync" / "models" / "rankmodel.toml")  # the rank model read the wheel's file
    done = subprocess.run([evtsync, "-q", "fit", "demo/tables/zscores.parquet", "--model", "gev-hier-gpu-precision",
                           "--draws", "200", "--tune", "200", "--chains", "2", "--seed", "1", "--out", "hier"],
                          cwd=work, env=env, capture_output=True, text=True, timeout=600)
    # exit 1 = fitted but flagged not converged at these short settings; both mean the model was found
    assert done.returncode in (0, 1), done.stderr[-3000:]
    assert (work / "hier" / "fit.nc").is_file()

    # the NCCL Inspector tax from the installed copy: the hand tax (max - min of the times written
    # here) and, on this clean job, neither pandas nor pyarrow imported (-X importtime lists every import)
    logs = work / "inspector"
    logs.mkdir()
    times = [[100 + (rank * 7 + sn) % 13 for rank in range(4)] for sn in range(9)]
    for rank in range(4):
        (logs / f"h0-pid{rank}.log").write_text("".join(json.dumps(
            {"header": {"id": "0xw", "comm_name": "pg", "rank": rank, "n_ranks": 4, "nnodes": 1},
             "metadata": {"inspector_output_format_version": "v4.0", "dump_timestamp_us": 1000 + sn,
                          "hostname": "h0", "pid": rank},
             "coll_perf": {"coll": "AllReduce", "coll_sn": sn, "coll_msg_size_bytes": 1024,
                           "coll_exec_time_us": times[sn][rank], "coll_timing_source": "kernel_gpu"}}) + "\n"
            for sn in range(9)))
    taxed = _run([str(vpy), "-X", "importtime", "-m", "evtsync", "tax", str(logs), "--json"], cwd=work, env=env)
    imported = {line.split("|")[-1].strip().split(".")[0] for line in taxed.stderr.splitlines()
                if line.startswith("import time:")}
    assert "evtsync" in imported and not {"pandas", "pyarrow"} & imported
    (summary,) = json.loads(taxed.stdout)["summary"]
    taus = sorted(float(max(t) - min(t)) for t in times)
    assert summary["count"] == 9 and summary["n_invalid"] == 0
    assert summary["tau_max_us"] == taus[-1] and summary["tau_median_us"] == taus[4]
