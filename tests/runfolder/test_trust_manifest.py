"""A run folder's manifest cannot make evtsync touch a file outside the folder (issue 47, item 1;
docs/security.md).

The attack: add to ``manifest.json`` a stage whose ``outputs`` name a file outside the run
folder, by an absolute path and by ``../v2``, then run ``evtsync run --out R`` again. Before the
fix the engine deleted both (the stale-stage cleanup, and the outputs a stage no longer writes);
now the manifest is refused with the path named, the CLI exits non-zero and both files are
still there (read back here, byte for byte).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evtsync.core.errors import InputError
from evtsync.core.trust import contained, containment_problem
from evtsync.pipeline import RunOptions
from evtsync.pipeline.engine import Run, Stage, execute
from evtsync.runfolder.layout import read_manifest

VICTIM_TEXT = "a file of the user's, outside the run folder\n"


def _stages(run: Run) -> list[Stage]:
    """One made-up stage writing one table (the engine is what is under test, not the stages)."""
    def body(r: Run) -> dict:
        r.produced("a", r.write_json("tables/a.json", {"v": 1}))
        return {}
    return [Stage("a", body, (), lambda r: {})]


def _victims(tmp_path: Path) -> tuple[Path, Path]:
    """Two files outside the run folder ``tmp_path/R``: one named absolutely, one as ``../v2``."""
    absolute = tmp_path / "elsewhere" / "v1.txt"
    absolute.parent.mkdir()
    absolute.write_text(VICTIM_TEXT)
    sibling = tmp_path / "v2"
    sibling.write_text(VICTIM_TEXT)
    return absolute, sibling


def _doctor(out: Path, stage: str, outputs: list[str]) -> None:
    """Edit the manifest as an attacker would: ``stage``'s outputs name ``outputs``."""
    path = out / "manifest.json"
    manifest = json.loads(path.read_text())
    entry = manifest["stages"].setdefault(stage, {"key": "x", "status": "done", "outputs": {}})
    entry["outputs"].update({rel: "0" * 64 for rel in outputs})
    path.write_text(json.dumps(manifest))


@pytest.mark.parametrize("where", ["stale stage", "output no longer written"])
def test_a_manifest_naming_files_outside_is_refused_and_nothing_is_deleted(tmp_path: Path, where: str) -> None:
    out = tmp_path / "R"
    execute(Run(RunOptions(out=out)), _stages)
    absolute, sibling = _victims(tmp_path)
    # "stale stage": a stage the run no longer has (removed with its outputs); "output no longer
    # written": stage a's own entry, whose key changes so that it runs and drops what it no longer writes
    _doctor(out, "ghost" if where == "stale stage" else "a", [str(absolute), "../v2"])
    if where != "stale stage":
        manifest = json.loads((out / "manifest.json").read_text())
        manifest["stages"]["a"]["key"] = "changed"
        (out / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(InputError, match=r"lists an output that names '(/|\.\./v2)"):
        execute(Run(RunOptions(out=out)), _stages)
    with pytest.raises(InputError, match="not inside"):  # every reader of the run folder reads it so
        read_manifest(out)
    assert absolute.read_text() == VICTIM_TEXT and sibling.read_text() == VICTIM_TEXT
    assert (out / "tables" / "a.json").is_file()  # the run's own output is not touched either
    # the way out the message names: --force rebuilds the manifest without touching those paths
    run = execute(Run(RunOptions(out=out, force=True)), _stages)
    assert absolute.read_text() == VICTIM_TEXT and sibling.read_text() == VICTIM_TEXT
    assert set(run.manifest["stages"]) == {"a"} and read_manifest(out)["stages"]["a"]["status"] == "done"


def test_the_cli_exits_non_zero_naming_the_path_and_deletes_nothing(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str],
                                                                     traces_dir: Path) -> None:
    from evtsync.cli import main

    out = tmp_path / "R"
    execute(Run(RunOptions(out=out)), _stages)  # a run folder (its manifest) made cheaply
    absolute, sibling = _victims(tmp_path)
    _doctor(out, "ghost", [str(absolute), "../v2"])
    code = main(["-q", "run", str(traces_dir / "dlrm-8rank-v100"), "--out", str(out), "--no-report"])
    err = capsys.readouterr().err
    assert code != 0
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert (str(absolute) in err or "../v2" in err) and "not inside" in err
    assert absolute.read_text() == VICTIM_TEXT and sibling.read_text() == VICTIM_TEXT
    # the report and diff read the same manifest: refused too, nothing read through it
    assert main(["-q", "report", str(out)]) != 0
    assert "not inside" in capsys.readouterr().err


def test_a_link_out_of_the_run_folder_is_outside(tmp_path: Path) -> None:
    out = tmp_path / "R"
    execute(Run(RunOptions(out=out)), _stages)
    absolute, _ = _victims(tmp_path)
    (out / "tables" / "out").symlink_to(absolute.parent, target_is_directory=True)
    _doctor(out, "ghost", ["tables/out/v1.txt"])
    with pytest.raises(InputError, match="through a link"):
        execute(Run(RunOptions(out=out)), _stages)
    assert absolute.read_text() == VICTIM_TEXT


@pytest.mark.parametrize(("rel", "why"), [("/etc/passwd", "absolute"), ("../v2", "'..'"), ("a/../../v2", "'..'"),
                                          ("", "non-empty"), (7, "non-empty"), ("a\\..\\b", "backslash"),
                                          (".", "folder itself")])
def test_containment_refuses_each_way_out(tmp_path: Path, rel: object, why: str) -> None:
    problem = containment_problem(tmp_path, rel)
    assert problem is not None and why in problem
    with pytest.raises(InputError, match="not inside"):
        contained(tmp_path, rel, "test")


def test_containment_accepts_a_plain_relative_path(tmp_path: Path) -> None:
    assert contained(tmp_path, "tables/x.parquet", "test") == tmp_path / "tables" / "x.parquet"
    (tmp_path / "inner").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "inner", target_is_directory=True)
    assert containment_problem(tmp_path, "link/x") is None  # a link that stays inside


def test_an_output_that_names_a_folder_of_the_run_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "R"
    execute(Run(RunOptions(out=out)), _stages)
    _doctor(out, "ghost", ["tables"])
    with pytest.raises(InputError, match="'tables' is a folder"):
        execute(Run(RunOptions(out=out)), _stages)
    assert (out / "tables" / "a.json").is_file()
