"""ranktail on the shock and drift jobs' own normal ranks (issue 45, reps45; docs/bayesian.md, "More replicates").

The study's shock and drift jobs (``study_rankmodel.py``, seeds ``1000 r + case index``) draw their
shift from a random stream of its own: the same seed with ``parent="normal"`` and no shift gives the
same rank values to integer rounding (the centred residuals agree to 0.025 sd, b to 0.1%). ranktail
on that shift-free job is the paired reference the study's ranktail rows cannot be for these cases
(it does not remove a shared shift). One line per job, in ``study_rankmodel.py``'s format, the case
named ``<case>-free``.

    nice -n 10 .venv/bin/python benchmarks/shiftfree_reference.py drift 30 benchmarks/results/study_rankmodel_reps45_shiftfree.jsonl
    .venv/bin/python benchmarks/shiftfree_reference.py --table benchmarks/results/study_rankmodel_reps45_shiftfree.jsonl benchmarks/results/study_rankmodel_reps45.jsonl benchmarks/results/study_rankmodel_calib45.jsonl

``--table FREE RANKMODEL...``: per n, the rank model's shock and drift rows against ranktail on the same
jobs without the shift: point/true, covering, misses above/below, the paired ratio, the sd of point/true
over the jobs and the mean log half-width of the interval ÷ 1.645 of each.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
from study_rankmodel import ALL_CASES, _job, _rows, _summary_fit, load  # noqa: E402


def table(free: str, paths: list[str]) -> None:
    """The paired comparison (module docstring)."""
    rm = load(paths)
    rm = rm[(rm["estimator"] == "rankmodel") & rm["case"].isin(["drift", "shock"])]
    fr = load([free]).assign(case=lambda f: f["case"].str.replace("-free", "", regex=False))
    m = rm.merge(fr, on=["case", "replicate", "n"], suffixes=("_rm", "_rt"))
    print("| n | jobs | estimator | point/true (± se) | covering | above / below | sd of point/true | "
          "log half-width ÷ 1.645 | rank model ÷ ranktail, paired (± se; sd) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n, g in m.groupby("n"):
        r = g["point_rm"] / g["point_rt"]
        for est, lab in (("rm", "rank model"), ("rt", "ranktail, shift-free")):
            ratio = g[f"ratio_{est}"]
            half = (np.log(g[f"hi_{est}"] / g[f"lo_{est}"]) / 2 / 1.645).mean()
            paired = f"{r.mean():.3f} (± {r.std() / np.sqrt(len(r)):.3f}; {100 * r.std():.1f}%)" if est == "rm" else ""
            print(f"| {int(n)} | {len(g)} | {lab} | {ratio.mean():.3f} (± {ratio.std() / np.sqrt(len(g)):.3f}) | "
                  f"{int(g[f'covers_{est}'].sum())} | {int((g[f'lo_{est}'] > g[f'true_{est}']).sum())} / "
                  f"{int((g[f'hi_{est}'] < g[f'true_{est}']).sum())} | {100 * ratio.std():.1f}% | {100 * half:.1f}% | "
                  f"{paired} |")


def main() -> None:
    if sys.argv[1] == "--table":
        table(sys.argv[2], sys.argv[3:])
        return
    case, reps, out_path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    with open(out_path, "a", encoding="utf-8") as out:
        for rep in range(reps):
            seed = 1000 * rep + ALL_CASES.index(case)
            with tempfile.TemporaryDirectory() as tmp:
                cpu0 = time.process_time()
                z, truth, b_ratio = _job(tmp, seed, parent="normal")
                synth = time.process_time() - cpu0
            cpu0 = time.process_time()
            q, attrs = _summary_fit(z, "ranktail", seed)
            out.write(json.dumps({"case": f"{case}-free", "replicate": rep, "seed": seed, "estimator": "ranktail",
                                  "cell": f"{z['gpu'].iloc[0]}|{z['precision'].iloc[0]}", "b_ratio": b_ratio, **attrs,
                                  "synth_cpu_s": round(synth, 2), "cpu_s": round(time.process_time() - cpu0, 2),
                                  "wall_s": None, "load": None, "rows": _rows(truth, **q)}) + "\n")
            out.flush()


if __name__ == "__main__":
    main()
