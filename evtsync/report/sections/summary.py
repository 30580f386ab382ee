"""The summary, the report's first screen: four answers, each one sentence with its number and
interval (:func:`first_answers`: the tax now; who straggles and why; what the job would gain without
its stragglers; what a bigger domain will pay), then the answer table (one row per GPU × precision,
from ``tables/summary.parquet``; one card per row on a narrow screen, :func:`summary_cards`), then the
LOO line, how the numbers are computed and who straggles per process group (issue 49)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from evtsync.core.display import fmt, fmt_interval, fmt_share, point_key
from evtsync.critpath.replay import FLOOR_SHARE, K_SCALE
from evtsync.predict.hockney import topology_label
from evtsync.report.context import PCT, ReportContext, fit_rows, slug
from evtsync.report.markdown import (
    Alert,
    Answer,
    Caption,
    Card,
    Cards,
    Link,
    Section,
    Skipped,
    Table,
)
from evtsync.report.sections.stragglers import straggler_table
from evtsync.report.wording import all_cpu, device_word, tau_words
from evtsync.runfolder.layout import STATUS_TEXT
from evtsync.runfolder.summary import LIGHT_TAIL, NOT_RECORDED, NOTE_SEPARATOR, read_summary

#: The summary's column of notes (convergence, refusals) shown beside the numbers.
SUMMARY_NOTE = "flags"


def build(ctx: ReportContext) -> list[Section]:
    """This module's sections of the run report (see the module docstring)."""
    from evtsync.runfolder.layout import incomplete_notes

    numbers, info = read_summary(ctx.run_dir, ctx.manifest)
    items: list[Any] = [Alert(note) for note in incomplete_notes(ctx.manifest)]  # a failed workload, missing ranks
    fits = fit_rows(ctx.run_dir, ctx.manifest)
    bad = fits[(fits["status"] == "done") & (fits["converged"] == False)] if len(fits) else fits  # noqa: E712
    for row in bad.itertuples():
        items.append(Alert(f"Fit {row.model} did NOT converge ({row.convergence}). Every number computed from it "
                           "is marked; rerun with more --draws/--tune before relying on it."))
    given = info.get("rank_model")
    rank: dict[str, Any] = given if isinstance(given, dict) else {}
    if rank.get("available") and rank.get("converged") is False:
        # in the function: rankreport imports rankmodel, and it xarray (issue 48: collection imports none)
        from evtsync.evt.rankreport import not_converged_words

        items.append(Alert(f"The {rank.get('model', 'rank model')}: {not_converged_words(str(rank.get('convergence')))}. Its "
                           "tail verdicts, shapes, slow ranks and variance shares are marked; rerun with more "
                           "--draws/--tune before relying on them."))
    for name, stage in ctx.manifest.get("stages", {}).items():
        if stage.get("status") == "failed":
            items.append(Alert(f"Stage {name} FAILED: {stage.get('reason', '')}"))
    if numbers.empty:
        items.append(Skipped("No summary: the run has no tax table (" + ctx.why_not("tax") + ")"))
        return [Section("Summary: the answers", items, anchor="summary")]
    n, model = info["n"], info["model"]

    def ci(row: Any, key: str, lo: str, hi: str, scale: float = 1.0, digits: int = 3, kind: str | None = None) -> str:
        value = row.get(key)
        if value is None or (isinstance(value, float) and np.isnan(value)):
            return "–"
        return fmt_interval(scale * value, scale * row[lo], scale * row[hi], row.get(kind) if kind else None, digits)

    records = numbers.to_dict(orient="records")
    split = [[n for n in str(r.get("notes") or "").split(NOTE_SEPARATOR) if n] for r in records]
    common = [n for n in split[0] if all(n in other for other in split) and "NOT converged" not in n] if split else []
    for r, notes in zip(records, split, strict=True):
        r["notes"] = "; ".join(n for n in notes if n not in common)
    cpu = all_cpu(r["gpu"] for r in records)  # a CPU-only (gloo) run: no GPU words (issue 46)
    device = device_word(cpu)
    shown = []
    for r in records:
        gslug = slug(r["gpu"])
        entry: dict[str, Any] = {
            f"{device} × precision": Link(cell_label(r), cell_anchor(r)),
            "tax median (µs)": Link(ci(r, "tax_median_us", "tax_median_lo_us", "tax_median_hi_us",
                                       kind="tax_median_interval"), f"#tax-{gslug}"),
            "tax P90 (µs)": Link(ci(r, "tax_p90_us", "tax_p90_lo_us", "tax_p90_hi_us"), f"#tax-{gslug}"),
            "top root cause (share of tax)": Link(root_cell(r), f"#attribution-{gslug}"),
            "saving without stragglers ≤ (µs)": Link(
                ci(r, "tax_mean_us", "tax_mean_lo_us", "tax_mean_hi_us"), f"#tax-{gslug}"),
            "GPU-only stragglers (%)": Link(ci(r, "gpu_only_share", "gpu_only_share_lo", "gpu_only_share_hi", 100.0),
                                            f"#attribution-{gslug}"),
            "tail, xi": Link(tail_text(r, ci, "\n"), "#xi"),
            f"tau(n = {n}) (µs)": Link(ci(r, point_key(r, "tau", "_us"), "tau_lo_us", "tau_hi_us"), "#tau"),
        }
        for topo in info["topologies"]:
            entry[f"B*, {topology_label(topo)} (GB/s)"] = Link(
                ci(r, f"bstar_{topo}_gbps", f"bstar_{topo}_lo_gbps", f"bstar_{topo}_hi_gbps"), "#bstar")
        if any(split):
            entry[SUMMARY_NOTE] = r.get("notes") or "–"
        entry["not converged"] = not bool(r.get("converged", True))
        shown.append(entry)
    frame = pd.DataFrame(shown)
    if cpu:  # CPU-side collectives have no GPU-only path share
        frame = frame.drop(columns=["GPU-only stragglers (%)"])
    if SUMMARY_NOTE in frame and (frame[SUMMARY_NOTE] == "–").all():
        frame = frame.drop(columns=[SUMMARY_NOTE])
    by = (_estimator_words(info.get("estimator"), model, info.get("point_estimate")) if info.get("estimator")
          else f"{model or 'no fit'}")
    items += first_answers(records, info, ctx, by)
    fleet = _fleet_words(records)
    items.append(Table(frame, f"Per {device} × precision: value [{PCT} interval], each linked to its section; the top root "
                              f"cause with its share of the cell's tax; saving without stragglers: at most the mean tax "
                              f"per collective; the tail verdict (light (Gumbel): light tail, Gumbel domain) beside the {PCT} "
                              f"interval of the shape it reads (rank model: posterior median of xi of the rank times' "
                              f"GPD tail with P(xi > 0); GPD: xi of the rank times' tail by ranktail; GEV: posterior "
                              f"mean of xi of {model or 'no fit'}); tau and B* by {by} at n = {n} ranks"
                              + (f" ({fleet})" if fleet else "") + ". An "
                              "interval marked \"range of n\" is [min, max] of n values, too few for the level; ∞: too "
                              "few values to bound that side. Rows in red: fit not converged.",
                       flag="not converged", css_class="summary", note=SUMMARY_NOTE))
    items.append(summary_cards(records, info, ci, n))
    for note in common:
        items.append(Alert(f"Every row of the summary: {note}.", level="warning"))
    view = ctx.estimator
    if view.explicit and view.asked != view.run:
        items.append(Alert(f"The summary's tau and B* are by the run's estimator, {view.run}; the sections below "
                           f"show the {view.asked} estimator asked with --estimator where the run stored it.",
                           level="warning"))
    compare = ctx.stage("compare")
    loo = info["loo"] or (f"LOO comparison: stage compare {STATUS_TEXT.get(compare.get('status', 'not run'), 'not run')}"
                          f": {compare.get('reason') or 'no reason recorded'} (why, and what to do: the notes below).")
    items.append(Link(loo, "#compare"))
    if info.get("loo_and_tail"):
        items.append(info["loo_and_tail"])
    items.append(Caption(methods_text(rank, info, model, fleet)))
    items.append(Caption(f"How the summary is computed: tax = max − min {tau_words(cpu)} over the member ranks, over "
                 f"the valid collectives of the process group(s) the compute blocks were cut from (the PG tau(n) "
                 f"predicts), median and 90th percentile with distribution-free order-statistic {PCT} intervals; "
                 f"the saving without stragglers is bounded by the mean tax per collective (Student-t {PCT} interval): "
                 f"what a collective would save if every rank arrived with the first, not a replay of the step; root "
                 f"causes: the attributed collectives' tax summed per root (workload, rank, cause) over the cell, as a "
                 f"share of the tax of every collective walked to a root; "
                 + ("" if cpu else f"GPU-only share = attributed collectives whose straggler path is GPU-only, "
                                   f"Wilson {PCT} interval; ")
                 + f"tau(n) and B* in GB/s per topology (its reduction 1 − B*/B*_H: the B* section) are point estimates "
                 f"({point_words(info.get('point_estimate'))}) with {PCT} intervals of {by}"
                 + (f", the centred estimator of {model} (m = {ctx.manifest.get('options', {}).get('m', 4)}) "
                    "where the default cannot predict (labelled in the notes)" if model else "")
                 + f"; the tail verdict is the rank times' domain of attraction, read from the {PCT} interval of a "
                 + ("shape xi of the rank times' tail: the hierarchical rank model's (posterior median shown) "
                    if rank.get("available") else
                    f"shape: the GPD shape of ranktail's tail where ranktail predicts, elsewhere xi of "
                    f"{model or 'the GEV'}'s block maxima (posterior mean shown) ")
                 + "— heavy (Fréchet) when it lies above 0, bounded (Weibull) below 0, light tail (Gumbel domain) when "
                 "it holds 0."))
    items.append(Caption(f"Who straggles (all process groups; per {device} in its tax section):"))
    items.append(straggler_table(ctx))
    if ctx.manifest.get("demo"):
        items.append(Alert(demo_note(ctx.manifest), level="warning"))
    return [Section("Summary: the answers", items, anchor="summary")]


def demo_note(manifest: dict[str, Any]) -> str:
    """What the bundled demo is and the sampler settings it was fitted with, compared with a real
    run's defaults (:mod:`evtsync.core.defaults`): "the same as a real run's" where they are."""
    from evtsync.core.defaults import DEFAULT_CHAINS, DEFAULT_DRAWS, DEFAULT_TUNE

    s = manifest.get("sampling", {})
    used = (s.get("draws"), s.get("tune"), s.get("chains"))
    real = (DEFAULT_DRAWS, DEFAULT_TUNE, DEFAULT_CHAINS)
    same = "the same as a real run's" if used == real else f"a real run's defaults: {real[0]} / {real[1]} / {real[2]}"
    rank = ((manifest.get("stages", {}).get("rankmodel") or {}).get("summary") or {})
    model = (f"the rank model (the headline) fitted with {rank['draws']} draws, {rank['tune']} tuning steps, "
             f"{rank['chains']} chains (its specification's, models/rankmodel.toml, unless --draws/--tune/--chains "
             "set others); " if all(k in rank for k in ("draws", "tune", "chains")) else "")
    return (f"The bundled demo: a synthetic study with known truth (see \"Estimates vs ground truth\"): {model}"
            f"the Bayesian GEV comparators, where run, with {used[0]} draws, {used[1]} tuning steps, {used[2]} chains "
            f"({same}) unless a model's own [sampling] table asks for others (each fit records its own).")


def cell_label(r: dict[str, Any]) -> str:
    """A summary row's name: "H100 bf16" (the GPU alone for a run without precisions)."""
    return f"{r['gpu']} {r['precision']}" if r.get("precision") not in (None, "all") else str(r["gpu"])


def cell_anchor(r: dict[str, Any]) -> str:
    """The report anchor of a summary row's section."""
    gslug, pslug = slug(r["gpu"]), slug(r["precision"])
    return f"#cell-{gslug}-{pslug}" if r["precision"] != "all" else f"#gpu-{gslug}"


def _number(r: dict[str, Any], key: str) -> float | None:
    value = r.get(key)
    if value is None:
        return None
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return None if np.isnan(value) else value


#: Longest root-cause name (a kernel's) in the first screen's sentence; the tables have it whole.
SHORT_CAUSE = 44


def root_text(r: dict[str, Any], place: int, short: bool = False) -> str:
    """The ``place``-th root cause of a summary row in words: "rank 7 of a100-bf16: gemm ampere_…
    (12.3%)", its share of the cell's attributed tax ("–" where the row has none)."""
    share = _number(r, f"root{place}_share")
    if share is None:
        return "–"
    cause = str(r.get(f"root{place}_cause") or "?")
    if short and len(cause) > SHORT_CAUSE:
        cause = cause[: SHORT_CAUSE - 1] + "…"
    category = str(r.get(f"root{place}_category") or "")
    what = f"{category} {cause}" if category and category not in ("nan", "None") else cause
    return f"rank {r.get(f'root{place}_rank')} of {r.get(f'root{place}_workload')}: {what} ({fmt_share(share)})"


def root_cell(r: dict[str, Any]) -> str:
    """The summary table's top root cause: "rank 7 (a100-bf16)" over "gemm, 12.3%" (the kernel's
    name is in the first screen's sentence and the attribution section)."""
    share = _number(r, "root1_share")
    if share is None:
        return "–"
    category = str(r.get("root1_category") or "")
    what = category if category not in ("", "nan", "None") else "cause"
    return f"rank {r.get('root1_rank')} ({r.get('root1_workload')})\n{what}, {fmt_share(share)}"


def slow_rank_text(r: dict[str, Any]) -> str:
    """The persistently slow rank of a summary row, where the summary names one (``slow_rank_text``,
    a sentence written by the model that estimates a persistent rank effect; issue 45); "" otherwise:
    the first screen says nothing about slow nodes a run has not estimated."""
    text = r.get("slow_rank_text")
    return str(text).strip() if isinstance(text, str) and text.strip() else ""


def first_answers(records: list[dict[str, Any]], info: dict[str, Any], ctx: ReportContext, by: str) -> list[Answer]:
    """The first screen's four answers, in order, each one sentence with its number and interval:
    the tax now (the costliest and cheapest GPU × precision by median tax); who straggles and why on
    the costliest (its top root causes with their share, and a persistently slow rank where the
    summary names one); what it would gain without its stragglers (the step-time replay where
    summary.json has it, else the bound from the measured tax, labelled as such); what a bigger
    domain pays (tau(n) at the summary's n with its interval, and B*)."""
    priced = [r for r in records if _number(r, "tax_median_us") is not None]
    if not priced:
        return [Answer("tax", "The tax now", "no collective was measured (see the alerts above).", "#summary")]
    ranked = sorted(priced, key=lambda r: _number(r, "tax_median_us") or 0.0)  # which row, not a statistic
    best, worst = ranked[0], ranked[-1]
    name = cell_label(worst)

    def interval(r: dict[str, Any], key: str, lo: str, hi: str, kind: str | None = None) -> str:
        return fmt_interval(r.get(key), r.get(lo), r.get(hi), r.get(kind) if kind else None)

    tax = (f"the median collective waits {interval(worst, 'tax_median_us', 'tax_median_lo_us', 'tax_median_hi_us', 'tax_median_interval')} µs "
           f"for its slowest rank on {name}")
    if len(priced) > 1:
        device = device_word(all_cpu(r["gpu"] for r in records))
        tax += (f", the most of {len(priced)} {device} × precision cells; the least is "
                f"{interval(best, 'tax_median_us', 'tax_median_lo_us', 'tax_median_hi_us', 'tax_median_interval')} µs on "
                f"{cell_label(best)}.")
    else:
        tax += (f" (P90 {interval(worst, 'tax_p90_us', 'tax_p90_lo_us', 'tax_p90_hi_us')} µs, "
                f"{worst.get('n_collectives')} collectives).")
    answers = [Answer("tax", "The tax now", tax, f"#tax-{slug(worst['gpu'])}")]

    gslug = slug(worst["gpu"])
    if _number(worst, "root1_share") is not None:
        category = (f"{worst.get('root_top_category')} kernels are the root cause of "
                    f"{fmt_share(worst.get('root_top_category_share'))} of the attributed tax; "
                    if _number(worst, "root_top_category_share") is not None else "")
        who = (f"on {name}, {category}root cause #1 of {worst.get('n_root_causes')} is {root_text(worst, 1, short=True)}"
               + (f", #2 {root_text(worst, 2, short=True)}" if _number(worst, "root2_share") is not None else "")
               + ".")
    elif "root_tax_us" in worst:
        who = f"on {name} no collective was walked to a root cause (the attribution section says why)."
    else:
        who = "no root causes: " + ctx.why_not("attribution")
    slow = "; ".join(t for t in [slow_rank_text(worst)] + [slow_rank_text(r) for r in records if r is not worst] if t)
    if slow:
        who = f"{who[:-1]}; {slow}" + ("" if slow.endswith(".") else ".")
    shared = shared_text(records)
    if shared:
        who = f"{who} {shared}"
    answers.append(Answer("who", "Who straggles and why", who, f"#attribution-{gslug}"))

    step, without = _step_times(worst, info)
    if step is not None and without is not None and without >= step * (1 - NO_SAVING_SHARE):
        gain = (f"the step's replay finds no straggler op (none over {K_SCALE:g} robust sd and "
                f"{fmt_share(FLOOR_SHARE)} of the step above typical): the {fmt(step)} ms step stays; the tax is "
                "ordinary variation across ranks.")
    elif step is not None and without is not None:
        gain = (f"this job would take {fmt(without)} ms per step instead of {fmt(step)} ms "
                f"(−{fmt_share(1 - without / step)}; counterfactual replay of the step{_duration_words(info)}).")
        fix = ctx.table("whatif_stragglers")
        if fix is not None and len(fix) and {"rank", "cause", "saving_ms_per_step"} <= set(fix.columns):
            top = fix.sort_values("saving_ms_per_step", ascending=False).iloc[0]
            gain = f"{gain[:-1]}; fixing {top['cause']} on rank {top['rank']} alone saves {fmt(top['saving_ms_per_step'])} ms."
    elif _number(worst, "tax_mean_us") is not None:
        gain = (f"each collective on {name} would save at most its tax, "
                f"{interval(worst, 'tax_mean_us', 'tax_mean_lo_us', 'tax_mean_hi_us')} µs on average "
                f"({fmt(worst.get('tax_total_ms'))} ms over its {worst.get('n_collectives')} collectives): an upper bound "
                "from the measured tax, not a replay of the step.")
    else:
        gain = "no measured tax to bound it (see the alerts above)."
    answers.append(Answer("without", "Without its stragglers", gain, f"#tax-{gslug}"))

    n = info.get("n")
    tau = _number(worst, point_key(worst, "tau", "_us"))
    if tau is not None:
        fleet = worst.get("fleet_assumption")
        bigger = (f"at n = {n} ranks, {name} would pay tau(n) = "
                  f"{interval(worst, point_key(worst, 'tau', '_us'), 'tau_lo_us', 'tau_hi_us')} µs per collective "
                  f"({_short_estimator(worst, info)}" + (f"; {fleet}" if isinstance(fleet, str) and fleet else "") + ")")
        topos = [t for t in info.get("topologies", []) if _number(worst, f"bstar_{t}_gbps") is not None]
        if topos:
            t = topos[0]
            bigger += (f"; its optimal bandwidth B* ({topology_label(t)}) is "
                       f"{interval(worst, f'bstar_{t}_gbps', f'bstar_{t}_lo_gbps', f'bstar_{t}_hi_gbps')} GB/s")
        bigger += "."
    else:
        bigger = "no prediction: " + ctx.why_not("prediction")
    answers.append(Answer("bigger", "A bigger domain", bigger, "#tau"))
    return answers


#: A replayed step within this share of the measured one saves nothing worth a sentence.
NO_SAVING_SHARE = 0.0005


def _step_times(r: dict[str, Any], info: dict[str, Any]) -> tuple[float | None, float | None]:
    """The measured step time and the replay's step time without stragglers (ms) for the first
    screen: the row's own (a cell holding one job), else summary.json's only job, else none (several
    jobs: their step times are per job in summary.json, not one number)."""
    keys = ("step_time_ms", "step_time_without_stragglers_ms")
    if all(_number(r, k) is not None for k in keys):
        return _number(r, keys[0]), _number(r, keys[1])
    jobs = info.get("jobs") or []
    if len(jobs) == 1 and isinstance(jobs[0], dict):
        return _number(jobs[0], keys[0]), _number(jobs[0], keys[1])
    return _number(info, keys[0]), _number(info, keys[1])


def _duration_words(info: dict[str, Any]) -> str:
    """The what-if's duration model, short, from summary.json's ``jobs`` (docs/critical-path.md §8):
    "; op durations independent" or "; ranks sharing cores (--host-cores 2)"; "" when the jobs do not
    record it (an older run) or differ (then each job's is in summary.json)."""
    jobs = [j for j in info.get("jobs") or [] if isinstance(j, dict) and "whatif_host_cores" in j
            and j.get("whatif_durations") != NOT_RECORDED]  # summary.json of a run before the columns
    layouts = {j["whatif_host_cores"] for j in jobs}
    if not jobs or len(layouts) != 1 or len(jobs) != len(info.get("jobs") or []):
        return ""
    (layout,) = layouts
    return "; op durations independent" if layout is None else f"; ranks sharing cores (--host-cores {layout})"


def _short_estimator(r: dict[str, Any], info: dict[str, Any]) -> str:
    """The estimator of a row's tau(n) and what its point is, short: "ranktail, posterior median"."""
    name = str(r.get("estimator") or info.get("estimator") or info.get("model") or "")
    given = info.get("point_estimate")
    points: dict[str, Any] = given if isinstance(given, dict) else {}
    point = str(r.get("point_estimate") or points.get(name, "") or "")
    return ", ".join(p for p in (f"{name} estimator" if name else "", point) if p) or "no estimator named"


def summary_cards(records: list[dict[str, Any]], info: dict[str, Any],
                  ci: Callable[..., str], n: Any) -> Cards:
    """The summary table as one card per GPU × precision (the narrow screen's form: no sideways scroll)."""
    cards = []
    for r in records:
        lines = [("tax median", ci(r, "tax_median_us", "tax_median_lo_us", "tax_median_hi_us",
                                   kind="tax_median_interval") + " µs"),
                 ("tax P90", ci(r, "tax_p90_us", "tax_p90_lo_us", "tax_p90_hi_us") + " µs"),
                 ("top root cause", root_text(r, 1, short=True)),
                 ("saving ≤", ci(r, "tax_mean_us", "tax_mean_lo_us", "tax_mean_hi_us") + " µs per collective"),
                 (f"tau(n = {n})", ci(r, point_key(r, "tau", "_us"), "tau_lo_us", "tau_hi_us") + " µs")]
        lines += [(f"B*, {topology_label(t)}", ci(r, f"bstar_{t}_gbps", f"bstar_{t}_lo_gbps", f"bstar_{t}_hi_gbps")
                   + " GB/s") for t in info.get("topologies", [])]
        lines.append(("tail (xi)", tail_text(r, ci, ", ")))
        if r.get("notes"):
            lines.append((SUMMARY_NOTE, str(r["notes"])))
        cards.append(Card(cell_label(r), cell_anchor(r), lines, flag=not bool(r.get("converged", True))))
    return Cards(cards)



def shared_text(records: list[dict[str, Any]]) -> str:
    """The first screen's sentence on shared shifts where they are material (share of the block variance
    shared by a collective's ranks ≥ :data:`MATERIAL_SHARED_SHARE` in some cell): they cost nothing in the
    tax, since they cancel in max − mean (docs/methodology.md, "The rank model"); "" otherwise."""
    # in the function: rankreport imports rankmodel, and it xarray (issue 48: collection imports none)
    from evtsync.evt.rankreport import MATERIAL_SHARED_SHARE

    material = [r for r in records if (_number(r, "share_shared") or 0.0) >= MATERIAL_SHARED_SHARE]
    if not material:
        return ""
    parts = []
    for r in material:
        drift = _number(r, "drift_range_sd")
        parts.append(f"{fmt_share(r['share_shared'])} on {cell_label(r)}"
                     + (f" (drift over the job {fmt(drift, 2)} sd)" if drift is not None else ""))
    return ("Shocks and drift shared by all ranks of a collective make up " + ", ".join(parts)
            + " of the block variance (rank model): they cost nothing in the tax — they cancel in max − mean.")


def _fleet_words(records: list[dict[str, Any]]) -> str:
    """The fleet assumption of the rows' tau(n) (the rank model's: "a job of n ranks from the same fleet"), "" if none."""
    words = [str(r["fleet_assumption"]) for r in records if isinstance(r.get("fleet_assumption"), str)
             and r["fleet_assumption"]]
    return words[0] if words else ""


def methods_text(rank: dict[str, Any], info: dict[str, Any], model: str | None, fleet: str) -> str:
    """The methods paragraph's first sentence: which model answers (the hierarchical rank model, with its
    sampler, and the fleet assumption of tau(n)), or why it does not."""
    if rank.get("available"):
        # in the function: rankreport imports rankmodel, and it xarray (issue 48: collection imports none)
        from evtsync.evt.rankreport import not_converged_words

        return (f"One model answers: the {rank.get('model')} of per-rank block times (docs/methodology.md, \"The rank "
                f"model\"): shared shifts per collective eliminated, a persistent effect per rank, a GPD tail whose "
                f"shape is pooled over GPUs and precisions; the tail verdicts, slow ranks, variance shares and LOO "
                f"(xi free vs xi = 0) are its"
                + (f"; tau(n) is for {fleet}" if fleet else "")
                + (". It " + not_converged_words(str(rank.get("convergence"))) if rank.get("converged") is False else "")
                + (f". The GEV fits of block maxima ({model}) are comparators, not the headline." if model else
                   ". The Bayesian GEV fits of block maxima, comparators only, did not run (opt-in: "
                   "--comparators bayes-gev); the GEV MLE, the paper's estimator and ranktail are the comparators."))
    reason = rank.get("reason") or "not in this run folder"
    return (f"The hierarchical rank model is not in this run: {reason}. The tail verdicts and LOO below are the GEV "
            "fits' of block maxima and ranktail's.")


def tail_text(r: dict[str, Any], ci: Callable[..., str], sep: str) -> str:
    """A row's tail verdict beside the interval it was read from: the rank model's xi (posterior
    median, interval, P(xi > 0)) where the row has it, else the GPD shape of the rank times'
    tail (``gpd_xi_*``), else xi of the GEV of the block maxima — never a verdict
    beside another shape's interval (issue 45: no verdict contradicts its xi interval)."""
    if _number(r, "rank_xi_lo") is not None and _number(r, "rank_xi_hi") is not None:
        p = _number(r, "p_xi_positive")
        narrow = sep == "\n"  # the table's cell: the interval and P(xi > 0) on lines of their own (1280 px)
        interval = ci(r, 'rank_xi_median', 'rank_xi_lo', 'rank_xi_hi', digits=2)
        if narrow:
            interval = interval.replace(" [", "\n[", 1)
        shape = (f"rank model {interval}"
                 + (f"{sep if narrow else ', '}P(xi > 0) {fmt(p, 2)}" if p is not None else ""))
    elif _number(r, "gpd_xi_lo") is not None and _number(r, "gpd_xi_hi") is not None:
        shape = f"GPD {ci(r, 'gpd_xi_mean', 'gpd_xi_lo', 'gpd_xi_hi', digits=2)}"
    else:
        shape = f"GEV {ci(r, 'xi_mean', 'xi_lo', 'xi_hi', digits=2)}"
    verdict = str(r.get("verdict") or "–")
    if sep == "\n":  # the table's cell, kept narrow: "light (Gumbel)" (the caption and the cards say it whole)
        verdict = verdict.replace(LIGHT_TAIL, "light (Gumbel)")
    return f"{verdict}{sep}{shape}"


def point_words(points: Any) -> str:
    """What the summary's points are, per estimator ("ranktail: posterior median; centred: posterior
    mean"), from summary.json's ``point_estimate``; a summary written before it: its means."""
    if not isinstance(points, dict) or not points:
        return "posterior means: a summary written before the point was recorded"
    return "; ".join(f"{e}: {p}" for e, p in points.items())


def _estimator_words(estimators: Any, model: str | None, points: Any = None) -> str:
    """The summary's estimator(s) of tau(n), "ranktail (default; point: posterior median)" first, a
    fallback named as one; ``points`` maps an estimator to what its point is (summary.json's
    ``point_estimate``; a summary written before it: the posterior mean, then the point)."""
    from evtsync.core.defaults import DEFAULT_ESTIMATOR

    points = points if isinstance(points, dict) else {}
    names = [e.strip() for e in str(estimators).split(",") if e.strip()]
    return ", ".join((f"{e} (default" if e == DEFAULT_ESTIMATOR else f"{e} of {model or 'the main model'} "
                      "(fallback, labelled") + f"; point: {points.get(e, 'posterior mean')})" for e in names)
