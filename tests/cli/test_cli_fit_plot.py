"""``evtsync fit DATA --model M --plot P`` draws the posterior per cell (it crashed before the
redesign with ``ImportError: cannot import name '_figure'`` after the fit was saved).

The other drawing flags are tested beside their commands: ``fit --mle --plot`` and
``bandwidth --plot`` (test_cli_fit_bandwidth), ``predict --plot``, ``predict --straggler --plot``
and ``bandwidth --fit --plot`` (test_bayes_posterior), ``tax --plot`` (test_tax),
``attribute --plot`` (test_critpath_inject).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from evtsync.cli import main


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_fit_model_plot_writes_the_figure_and_the_report_reads_the_fit(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(2)
    table = pd.DataFrame({"gpu": np.repeat(["H200", "A100"], 150), "precision": "bf16",
                          "y": np.r_[rng.gumbel(0.8, 0.5, 150), rng.gumbel(0.6, 0.4, 150)]})
    data = tmp_path / "z.parquet"
    table.to_parquet(data)
    png, svg = tmp_path / "xi.png", tmp_path / "xi.svg"
    for plot in (png, svg):
        code = main(["-q", "fit", str(data), "--model", "gumbel-hier", "--draws", "40", "--tune", "40",
                     "--chains", "1", "--seed", "1", "--out", str(tmp_path / "fit"), "--plot", str(plot)])
        assert code in (0, 1)  # 1: short chains flagged not converged; the figure is drawn either way
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    text = svg.read_text(encoding="utf-8")
    assert "<svg" in text and "posterior of mu per cell" in text  # Gumbel: xi is fixed, mu is shown
    assert "A100" in text and "H200" in text
    out = capsys.readouterr().out
    assert "written:" in out and str(tmp_path / "fit") in out
    assert main(["-q", "report", str(tmp_path / "fit"), "--out", str(tmp_path / "rep")]) == 0
    assert (tmp_path / "rep" / "report.html").stat().st_size > 10_000
