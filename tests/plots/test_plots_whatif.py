"""The what-if and path figures: Fig. 10 (z-scores by GPU × precision), the straggler-vs-fastest
path view (on the real DLRM 8-rank traces), multi-eps B* panels and the FLOPS figure."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from evtsync.plots.paths import straggler_vs_fastest
from evtsync.plots.whatif import bstar_panels, bstar_vs_flops
from evtsync.plots.zscores import zscores_by_cell
from evtsync.predict.tables import bandwidth_table
from tests.conftest import TRACES
from tests.predict.test_predict_population import _hier_tree


def test_zscores_by_cell_grid_says_where_a_cell_is_empty() -> None:
    rng = np.random.default_rng(0)
    z = pd.DataFrame({"z": rng.gumbel(size=300), "gpu": ["A100"] * 100 + ["H200"] * 200,
                      "precision": ["bf16"] * 100 + ["bf16"] * 100 + ["fp32"] * 100})
    params = pd.DataFrame({"gpu": ["H200"], "precision": ["fp32"], "mu_median": [0.0], "sigma_median": [1.0],
                           "xi_median": [0.0]})
    fig = zscores_by_cell(z, params)
    axes = fig.axes
    assert len(axes) == 4  # 2 GPUs x 2 precisions
    texts = [t.get_text() for ax in axes for t in ax.texts]
    titles = [ax.get_title() for ax in axes]
    assert "no z-scores" in texts and any(t.endswith(", n=100") for t in titles)  # A100 fp32 absent; counts in titles
    assert sum(len(ax.lines) for ax in axes) == 1      # one fitted density: H200 fp32


def test_straggler_vs_fastest_on_real_dlrm_traces() -> None:
    from evtsync.critpath.attribution import attribute

    result = attribute(TRACES / "dlrm-8rank-v100")
    ok = result.collectives[result.collectives["status"] != "no_tax"]
    row = ok.sort_values("tau_max_us").iloc[-1]
    fig = straggler_vs_fastest(result.paths, row["pg"], int(row["index"]), result.collectives)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert any(lab.startswith(f"straggler (rank {int(row['straggler_rank'])})") for lab in labels)
    assert any(lab.startswith(f"fastest (rank {int(row['fastest_rank'])})") for lab in labels)
    annotations = [t.get_text() for t in ax.texts]
    sel = result.paths[(result.paths["pg"] == row["pg"]) & (result.paths["index"] == row["index"])
                       & (result.paths["role"] == "straggler")]
    top = sel.loc[sel["extra_us"].idxmax()]
    if top["extra_us"] > 0:
        assert any(str(top["name"])[:48] in a for a in annotations)
    with pytest.raises(Exception, match="no path kept"):
        straggler_vs_fastest(result.paths, row["pg"], 10_000)


def test_bstar_panels_one_row_per_eps_and_flops_figure() -> None:
    table = bandwidth_table(_hier_tree(), ["full", "ring"], [8, 256, 4096], 5.0, 2**28, 20.0, eps=[-0.5, -0.1],
                            flops_factor=[1, 2, 4], gpu="B200", precision="bf16")
    fig = bstar_panels(table, nvlink={"450 GB/s": 450.0, "900 GB/s": 900.0})
    assert len(fig.axes) == 4
    ref = [ln for ax in fig.axes for ln in ax.lines if ln.get_label() in ("450 GB/s", "900 GB/s")]
    assert len(ref) == 8
    assert any("population-level" in lab for lab in fig.axes[0].get_legend_handles_labels()[1])
    fig13 = bstar_vs_flops(table)
    assert len(fig13.axes) == 4
    labels = [ln.get_label() for ln in fig13.axes[0].lines]
    assert any(lab.startswith("n=256") for lab in labels) and any(lab.startswith("n=4096") for lab in labels)
    assert not any(lab.startswith("n=8 ") for lab in labels)


def test_bstar_shift_draws_the_relative_change_and_names_cells_left_out() -> None:
    from evtsync.core.errors import InputError
    from evtsync.plots.diff import bstar_shift

    rows = [{"cell": "H200|bf16", "topology": t, "n": n, "eps": e, "d_rel_lo": -0.3, "d_rel_median": -0.2,
             "d_rel_hi": -0.1, "verdict": "lower", "reason": "90% interval of B − A excludes 0", "level": 0.9}
            for t in ("full", "ring") for n in (8, 64) for e in (-0.5, -0.1)]
    rows.append({"cell": "H100|bf16", "topology": None, "n": None, "eps": None, "d_rel_lo": None,
                 "d_rel_median": None, "d_rel_hi": None, "verdict": "no verdict", "reason": "cell only in A",
                 "level": 0.9})
    fig = bstar_shift(pd.DataFrame(rows))
    assert len(fig.axes) == 2  # one panel per topology: the ratio is the same for every eps
    from matplotlib.collections import PathCollection

    points = [c for c in fig.axes[0].collections if isinstance(c, PathCollection) and len(c.get_offsets())]
    assert [list(p.get_offsets()[:, 1]) for p in points] == [[-20.0, -20.0]]  # the medians, in %
    assert any("H100|bf16" in t.get_text() for t in fig.texts)
    with pytest.raises(InputError, match="no row has a posterior"):
        bstar_shift(pd.DataFrame(rows[-1:]))
