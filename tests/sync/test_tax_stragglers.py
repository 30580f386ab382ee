"""Straggler identity per PG (methodology §3) against a hand-built tax table, counted by hand."""

from __future__ import annotations

import math

import pandas as pd

from evtsync.sync.tax import TaxTables, straggler_identity


def _tables() -> TaxTables:
    # PG "tp" (ranks 0-3), stragglers by index: 2 2 0 0 3 2 ; index 6 is invalid (straggler 1),
    # index 7 has no tax. PG "dp" (ranks 0, 4): one collective, straggler 4.
    strag = [2, 2, 0, 0, 3, 2, 1, 1]
    rows = [{"pg": "tp", "pg_desc": "mesh_tp", "index": i, "straggler_rank": s, "valid": i != 6,
             "tau_max_us": 0.0 if i == 7 else 10.0 + i} for i, s in enumerate(strag)]
    rows.append({"pg": "dp", "pg_desc": "dp", "index": 0, "straggler_rank": 4, "valid": True, "tau_max_us": 5.0})
    ranks = [{"pg": "tp", "index": i, "rank": r} for i in range(8) for r in range(4)]
    ranks += [{"pg": "dp", "index": 0, "rank": r} for r in (0, 4)]
    return TaxTables(pd.DataFrame(rows), pd.DataFrame(ranks))


def test_straggler_identity_by_hand():
    per_pg, per_rank = straggler_identity(_tables())
    tp = per_pg.set_index("pg").loc["tp"]
    # used: indices 0-5 -> stragglers 2 2 0 0 3 2; pairs (0,1)..(4,5): changes at 1-2, 3-4, 4-5
    assert tp["n_collectives"] == 6 and tp["n_skipped"] == 2
    assert tp["n_pairs"] == 5
    assert math.isclose(tp["change_rate"], 3 / 5)
    assert tp["n_distinct"] == 3
    assert tp["top_rank"] == 2 and math.isclose(tp["top_share"], 3 / 6)
    assert math.isclose(tp["uniform_share"], 0.25)
    shares = per_rank[per_rank["pg"] == "tp"].set_index("rank")
    assert shares["n_straggled"].to_dict() == {0: 2, 1: 0, 2: 3, 3: 1}   # rank 1 never (its row was invalid)
    assert math.isclose(shares["share"].sum(), 1.0)
    dp = per_pg.set_index("pg").loc["dp"]
    assert dp["n_pairs"] == 0 and math.isnan(dp["change_rate"]) and dp["n_distinct"] == 1
    assert per_rank[per_rank["pg"] == "dp"].set_index("rank")["n_straggled"].to_dict() == {0: 0, 4: 1}


def test_pairs_skip_gaps():
    """A skipped collective breaks the chain: (5, 7) is not a consecutive pair."""
    t = _tables()
    coll = t.collectives.copy()
    coll.loc[(coll["pg"] == "tp") & (coll["index"] == 6), "valid"] = True
    coll.loc[(coll["pg"] == "tp") & (coll["index"] == 7), "tau_max_us"] = 3.0
    per_pg, _ = straggler_identity(TaxTables(coll, t.ranks))
    tp = per_pg.set_index("pg").loc["tp"]
    # stragglers 2 2 0 0 3 2 1 1: 7 pairs, changes at 1-2, 3-4, 4-5, 5-6
    assert tp["n_pairs"] == 7 and math.isclose(tp["change_rate"], 4 / 7) and tp["n_distinct"] == 4


def test_straggler_identity_on_synthetic_truth(tmp_path):
    """Change rate and shares from the synthetic ground truth's stragglers, counted here."""
    import evtsync
    from evtsync.sync.tax import tax_from_traces
    from evtsync.synth import SynthConfig, synthesize

    res = synthesize(SynthConfig.build(ranks=4, tp=4, iterations=5, layers=2, seed=7), tmp_path / "s")
    truth = pd.DataFrame(res.truth["collectives"])
    _, tables = tax_from_traces(evtsync.load_traces(res.traces_dir))
    per_pg, per_rank = straggler_identity(tables)
    for pg, grp in truth.groupby("pg"):
        grp = grp.sort_values("index")
        s = grp["straggler_rank"].to_numpy()
        row = per_pg.set_index("pg").loc[str(pg)]
        assert row["n_collectives"] == len(grp)
        assert math.isclose(row["change_rate"], float((s[1:] != s[:-1]).mean()))
        assert row["n_distinct"] == len(set(s.tolist()))
        counts = pd.Series(s).value_counts()
        got = per_rank[per_rank["pg"] == str(pg)].set_index("rank")["n_straggled"]
        assert all(got.get(int(r), 0) == int(n) for r, n in counts.items())
