"""``gcbench report RUN_ID --paper``: the study's headline tables as Markdown and LaTeX
booktabs, with CIs and SIMULATED marks, and the LaTeX compiled by a real pdflatex.
Data: SYNTHETIC (tests/report/synthetic.py)."""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest
from synthetic import make_report_data

from gcbench.report import write_report
from gcbench.report.analysis import ReportSettings, analyze
from gcbench.report.fmt import fmt_num
from gcbench.report.render.paper import latex_escape, paper_tables, to_latex, to_markdown

FAST = ReportSettings(n_resamples=300)


@pytest.fixture(scope="module")
def studies():
    return analyze(make_report_data(kinds=("tinylm", "h2d", "resnet_cifar"), n_rep=6, failures=False), FAST)


def _rows(table):
    return [dict(zip(table.columns, r, strict=True)) for r in table.rows]


def _median(a, variant, metric):
    t = a.trials
    return float(np.median(t.loc[(t["variant"] == variant) & t["used"], metric]))


def test_regime_table_gives_j_per_token_change_against_pure_pytorch(studies):
    jt, h2d, gpu = paper_tables(studies)
    assert [t.key for t in (jt, h2d, gpu)] == ["regime-jtoken", "regime-h2d", "multigpu"]
    rows = _rows(jt)
    assert [(r["regime"], r["path"]) for r in rows] == [
        (m, p) for m in ("infer", "train") for p in ("torch", "external-go", "external-rust")
    ]
    for r in rows:
        want = _median(studies, f"tinylm-{r['regime']}[mode={r['regime']},path={r['path']}]", "j_per_token") * 1e3
        assert r["GPU J/token (mJ/token)"].startswith(fmt_num(want) + " [")
        if r["path"] == "torch":
            assert r["Δ GPU J/token vs pure PyTorch"] == "reference"
            continue
        ref = _median(studies, f"tinylm-{r['regime']}[mode={r['regime']},path=torch]", "j_per_token")
        change = 100 * (want / 1e3 / ref - 1)
        assert r["Δ GPU J/token vs pure PyTorch"].startswith(f"{change:+.2f} % [")
    assert "pooled = Σ GPU energy / Σ tokens" in jt.notes[0] and not jt.simulated


def test_h2d_table_gives_pinned_against_pageable_ratios(studies):
    h2d = paper_tables(studies)[1]
    for r in _rows(h2d):
        size = r["copy"].removeprefix("size_mib=")
        pinned = _median(studies, f"h2d[memory=pinned,size_mib={size}]", "gb_per_s")
        pageable = _median(studies, f"h2d[memory=pageable,size_mib={size}]", "gb_per_s")
        assert r["bandwidth ratio pinned/pageable"].startswith(f"{pinned / pageable:.3g}x [")
        jp = _median(studies, f"h2d[memory=pinned,size_mib={size}]", "gpu_j_per_gb")
        jq = _median(studies, f"h2d[memory=pageable,size_mib={size}]", "gpu_j_per_gb")
        assert r["J/GB ratio pinned/pageable"].startswith(f"{jp / jq:.3g}x [")
        assert 7.5 < pinned / pageable < 8.3 and 0.75 < jp / jq < 0.87  # ~8x, ~-19 % (synthetic)


def test_multigpu_table_gives_energy_time_co2e_against_the_uncapped_fp32_baseline(studies):
    gpu = paper_tables(studies)[2]
    rows = _rows(gpu)
    assert len(rows) == 12
    base = next(r for r in rows if r["Δ energy"] == "baseline")
    assert (base["gpus"], base["precision"], base["power_cap_w"]) == ("1", "fp32", "300")
    assert base["Δ time"] == base["Δ CO2e"] == "baseline"
    r = next(r for r in rows if (r["gpus"], r["precision"], r["power_cap_w"]) == ("1", "fp32", "250"))
    v = "resnet50-cifar10[gpus=1,power_cap_w=250,precision=fp32]"
    b = "resnet50-cifar10[gpus=1,power_cap_w=300,precision=fp32]"
    for col, metric in (("Δ energy", "total_energy_j"), ("Δ time", "duration_s"), ("Δ CO2e", "co2e_kg")):
        change = 100 * (_median(studies, v, metric) / _median(studies, b, metric) - 1)
        assert r[col].startswith(f"{change:+.2f} % ["), (col, r[col])
    assert r["total energy (GPU + CPU) (Wh)"].startswith(fmt_num(_median(studies, v, "total_energy_j") / 3600) + " [")
    assert "CO2e (gCO2e)" in gpu.columns


def test_simulated_figures_are_marked_in_both_formats():
    a = analyze(make_report_data(kinds=("tinylm",), n_rep=3, simulated=True, failures=False), FAST)
    (jt,) = paper_tables(a)
    assert jt.simulated and jt.title.startswith("SIMULATED: ")
    assert [jt.is_sim(i) for i in range(len(jt.columns))] == [False, False, False, True, True, True, False]
    tex = to_latex([jt], a)
    assert r"\caption{\textbf{SIMULATED}: GPU energy per token" in tex
    lines = tex.splitlines()
    sim_row = lines[lines.index(r"\toprule") + 1]  # the row above the heads
    assert [c.strip() for c in sim_row.removesuffix(r" \\").split("&")] == [
        "",
        "",
        "",
        r"\textbf{SIMULATED}",
        r"\textbf{SIMULATED}",
        r"\textbf{SIMULATED}",
        "",
    ]
    assert r"\textbf{SIMULATED}: GPU energy and every figure derived from it" in tex
    from gcbench.report.render.paper import to_markdown

    md = to_markdown([jt], a)
    assert "| **SIMULATED** GPU J/token (mJ/token) |" in md and "(SIMULATED)" in md.splitlines()[0]
    measured = analyze(make_report_data(kinds=("tinylm",), n_rep=3, failures=False), FAST)
    assert "SIMULATED" not in to_latex(paper_tables(measured), measured)


def test_latex_escape_keeps_pdflatex_happy():
    assert latex_escape("Δ 5 % of J/token_x & µs") == r"$\Delta$ 5\,\% of J/token\_x \& $\mu$s"
    assert latex_escape("-6.73 % [-8.10 %, +1.00 %]") == r"$-$6.73\,\% [$-$8.10\,\%, $+$1.00\,\%]"
    assert latex_escape("external-go, size=1 MiB") == "external-go, size=1 MiB"
    assert latex_escape("café ☃") == "cafe [U+2603]"


PDFLATEX = shutil.which("pdflatex")
KPSEWHICH = shutil.which("kpsewhich")


def _have_booktabs() -> bool:
    return (
        bool(KPSEWHICH)
        and subprocess.run([KPSEWHICH, "booktabs.sty"], capture_output=True, text=True).stdout.strip() != ""
    )


@pytest.mark.skipif(
    not PDFLATEX or not _have_booktabs(),
    reason="pdflatex or booktabs.sty absent: install Debian's texlive-latex-base "
    "and texlive-latex-recommended (scripts/system_deps.sh latex; CI does)",
)
@pytest.mark.parametrize("simulated", [False, True])
def test_paper_tex_compiles_with_pdflatex(tmp_path, simulated):
    data = make_report_data(kinds=("tinylm", "h2d", "resnet_cifar"), n_rep=3, simulated=simulated)
    paths = write_report(data, tmp_path / "report", settings=FAST, paper=True)
    assert paths.paper_md.name == "paper.md" and paths.paper_tex.name == "paper.tex"
    tex = paths.paper_tex.read_text(encoding="utf-8")
    assert tex.count(r"\toprule") == tex.count(r"\midrule") == tex.count(r"\bottomrule") == 3
    doc = tmp_path / "doc.tex"
    doc.write_text(
        "\\documentclass{article}\n\\usepackage{booktabs}\n\\usepackage{graphicx}\n"
        "\\begin{document}\n"
        f"\\input{{{paths.paper_tex.as_posix()}}}\n"
        f"\\input{{{paths.paper_tex.as_posix()}}}\n"  # twice: the fragment is reusable
        "\\end{document}\n",
        encoding="utf-8",
    )
    proc = subprocess.run(
        [PDFLATEX, "-interaction=nonstopmode", "-halt-on-error", doc.name],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    log = (tmp_path / "doc.log").read_text(encoding="utf-8", errors="replace")
    assert proc.returncode == 0, log[-3000:]
    assert "Output written on doc.pdf (" in log and (tmp_path / "doc.pdf").stat().st_size > 5000
    assert "Undefined control sequence" not in log and "Missing $ inserted" not in log
    assert "Overfull \\hbox" not in log  # wide tables are scaled to the line width


def test_pdflatex_is_installed_where_ci_runs():
    """CI (and `make system-deps`) installs pdflatex; only a machine without it may skip
    the compile test above, and this says so instead of passing silently."""
    import os

    if os.environ.get("CI") or os.environ.get("GCBENCH_REQUIRE_PDFLATEX"):
        assert PDFLATEX and _have_booktabs(), "pdflatex/booktabs missing: run scripts/system_deps.sh latex"
    elif not (PDFLATEX and _have_booktabs()):
        pytest.skip("pdflatex absent on this machine: the LaTeX compile test did not run")


def test_settings_a_plan_fixes_come_from_what_the_trials_recorded():
    """The smoke plan sets mode (and tinylm-train's path, ResNet's precision) as settings,
    not factors: the tables read them from the trials' recorded values."""
    data = make_report_data(kinds=("tinylm", "resnet_cifar"), n_rep=3, failures=False)
    t = data.trials
    t["mode"] = [f.get("mode") for f in t["factors"]]
    t["path"] = [f.get("path") for f in t["factors"]]
    t["precision"] = [f.get("precision") for f in t["factors"]]
    t["factors"] = [{k: v for k, v in f.items() if k != "mode"} for f in t["factors"]]
    train = t["workload"] == "tinylm-train"
    t.loc[train, "factors"] = [{} for _ in range(int(train.sum()))]
    t.loc[train, "variant"] = t.loc[train, "path"].map(lambda p: f"tinylm-train-{p}")
    t = t[~train | t["path"].eq("torch")]
    res = t["kind"] == "resnet_cifar"
    fp32 = t["precision"].eq("fp32") & t["factors"].map(lambda f: f.get("gpus") == 1)
    t = t[~res | fp32].copy()
    t.loc[t["kind"] == "resnet_cifar", "factors"] = [
        {"power_cap_w": f["power_cap_w"]} for f in t.loc[t["kind"] == "resnet_cifar", "factors"]
    ]
    t["gpus"] = [1.0 if k == "resnet_cifar" else np.nan for k in t["kind"]]
    data.trials = t.reset_index(drop=True)
    a = analyze(data, FAST)
    jt, gpu = paper_tables(a)
    rows = _rows(jt)
    assert [(r["regime"], r["path"], r["Δ GPU J/token vs pure PyTorch"]) for r in rows][-1] == (
        "train",
        "torch",
        "reference",
    )
    assert {r["regime"] for r in rows} == {"infer", "train"}
    g = _rows(gpu)
    assert {(r["gpus"], r["precision"]) for r in g} == {("1", "fp32")}
    assert sorted(r["power_cap_w"] for r in g) == ["200", "250", "300"]


def test_changes_of_small_groups_are_no_result_and_the_note_says_what_the_cells_hold():
    """2 vs 2 trials: no CI, so no "+3505.43 %" as a result; no group has a median either,
    so the note does not announce "median [95 % CI]" cells."""
    data = make_report_data(kinds=("tinylm", "h2d"), n_rep=2, failures=False)
    a = analyze(data, FAST)
    jt, h2d = paper_tables(a)
    for r in _rows(jt):
        change = r["Δ GPU J/token vs pure PyTorch"]
        assert change == "reference" if r["path"] == "torch" else change == "n too small (2 vs 2)"
        assert r["GPU J/token (mJ/token)"].startswith("trials: ")
    for r in _rows(h2d):
        assert r["bandwidth ratio pinned/pageable"] == r["J/GB ratio pinned/pageable"] == "n too small (2 vs 2)"
    for t in (jt, h2d):
        assert t.notes[0].startswith(
            'Cells: "trials: a, b": each valid trial\'s value, where a group has fewer '
            "than 3 valid trials (no median, no CI); no group here has the 3 valid "
            "trials a median needs."
        )
        assert "median [95 % CI]" not in t.notes[0]
        assert "no change here is a result" in t.notes[0] and "n too small" in t.notes[0]
    md = to_markdown([jt, h2d], a)
    assert not re.search(r"[-+]\d+\.\d\d %", md)


def test_mixed_tables_say_both_kinds_of_cells_and_inconclusive_changes_say_why():
    data = make_report_data(kinds=("tinylm",), n_rep=6, failures=False)
    t = data.trials
    # tinylm-infer external-go: two valid repetitions whose throughputs disagree (the twin rule)
    go = t.index[t["variant"] == "tinylm-infer[mode=infer,path=external-go]"]
    t.loc[go[:4], "valid"] = False
    go = go[3:]
    flag = (
        "twins disagree: the two valid repetitions ran at 70 and 1 steps/s (70.0x apart, limit 2x); "
        "the group is inconclusive"
    )
    t.loc[go[1:], "flags"] = pd.Series([[flag]] * len(go[1:]), index=go[1:])
    a = analyze(data, FAST)
    jt = paper_tables(a)[0]
    rows = {(r["regime"], r["path"]): r for r in _rows(jt)}
    assert rows[("infer", "external-go")]["Δ GPU J/token vs pure PyTorch"] == (
        "inconclusive (the two valid repetitions ran at 70 and 1 steps/s (70.0x apart, limit 2x); "
        "the group is inconclusive)"
    )
    assert re.fullmatch(
        r"[-+]\d+\.\d\d % \[[-+]\d+\.\d\d %, [-+]\d+\.\d\d %\]",
        rows[("infer", "external-rust")]["Δ GPU J/token vs pure PyTorch"],
    )
    assert jt.notes[0].startswith('Cells: median [95 % CI] over valid trials, or "trials: a, b"')
    assert "Δ: percentage change of the median J/token against path=torch (pure PyTorch)" in jt.notes[0]
    assert "(inconclusive)" in jt.notes[0]


def test_a_reference_whose_trials_are_all_invalid_is_missing_not_replaced(tmp_path):
    """The pure-PyTorch group of tinylm-infer with 0 of 3 valid trials (a bursty machine):
    the paper keeps pure PyTorch as the reference (no other path takes its place), gives
    no change and says why; the report counts no tested comparison, says the changes
    have no estimate, and names the empty group under its table."""
    data = make_report_data(kinds=("tinylm",), n_rep=5, failures=False)
    t = data.trials
    torch = "tinylm-infer[mode=infer,path=torch]"
    rows = t.index[t["variant"] == torch]
    assert len(rows) == 5
    t.loc[rows, "valid"] = False
    t.loc[rows, "reasons"] = pd.Series([["unstable window"]] * 5, index=rows)
    a = analyze(data, FAST)
    jt = paper_tables(a)[0]
    assert jt.columns[5] == "Δ GPU J/token vs pure PyTorch"
    infer = {r["path"]: r for r in _rows(jt) if r["regime"] == "infer"}
    assert "torch" not in infer  # no valid trial: no row of values
    assert {p: r["Δ GPU J/token vs pure PyTorch"] for p, r in infer.items()} == {
        "external-go": "–",
        "external-rust": "–",
    }
    assert (
        "No change for tinylm-infer[mode=infer,path=external-go], tinylm-infer[mode=infer,path=external-rust]: "
        "its path=torch group has no valid trial (the report's trials table gives each trial's reason)."
    ) in jt.notes
    # the train regime still compares against its own pure-PyTorch group
    train = {r["path"]: r["Δ GPU J/token vs pure PyTorch"] for r in _rows(jt) if r["regime"] == "train"}
    assert train["torch"] == "reference" and all(re.match(r"[-+]\d", v) for p, v in train.items() if p != "torch")

    paths = write_report(data, tmp_path / "r", settings=FAST)
    md = paths.markdown.read_text()
    tested = sum(
        1 for r in a.comparisons if not r.inconclusive and not r.not_compared and r.result.p_mannwhitney is not None
    )
    assert f"Holm-adjusted across the {tested} tested comparisons" in md
    assert "No value for groups without a valid trial: tinylm-infer[mode=infer,path=torch] (0 valid of 5)" in md


def test_no_headline_says_which_changes_have_no_estimate_at_all(tmp_path):
    """Every pure-PyTorch group invalid: no comparison has a CI, and none has even a point
    estimate; the headline section must not call them "point estimates"."""
    data = make_report_data(kinds=("tinylm",), n_rep=3, failures=False)
    t = data.trials
    rows = t.index[t["variant"].str.contains("path=torch")]
    t.loc[rows, "valid"] = False
    t.loc[rows, "reasons"] = pd.Series([["unstable window"]] * len(rows), index=rows)
    a = analyze(data, FAST)
    left_out = a.untested_for_ci()
    assert left_out and all(r.result.pct_change is None for r in left_out)
    md = write_report(data, tmp_path / "r", settings=FAST).markdown.read_text()
    heads = md.split("## Headlines")[1].split("## Groups")[0]
    assert f"{len(left_out)} have no estimate at all (a side has no valid trial)" in heads
    assert "point estimate" not in heads


def test_cells_note_counts_medians_without_a_ci_as_medians():
    """Groups of 3 and 5 valid trials show a median without brackets (no CI below 6 trials);
    the note must not say that no group has the trials a median needs (it read the brackets)."""
    data = make_report_data(kinds=("tinylm", "h2d"), n_rep=5, failures=False)
    t = data.trials
    # tinylm-infer: torch 3 valid, external-go 5, external-rust 3, and train's torch 2 (trials' values)
    for variant, n_invalid in (
        ("tinylm-infer[mode=infer,path=torch]", 2),
        ("tinylm-infer[mode=infer,path=external-rust]", 2),
        ("tinylm-train[mode=train,path=torch]", 3),
    ):
        rows = t.index[t["variant"] == variant][:n_invalid]
        t.loc[rows, "valid"] = False
        t.loc[rows, "reasons"] = pd.Series([["unstable window: ..."]] * len(rows), index=rows)
    a = analyze(data, FAST)
    jt, h2d = paper_tables(a)
    infer = {r["path"]: r for r in _rows(jt) if r["regime"] == "infer"}
    assert [infer[p]["n"] for p in ("torch", "external-go", "external-rust")] == ["3", "5", "3"]
    assert all(
        "[" not in r["GPU J/token (mJ/token)"] and not r["GPU J/token (mJ/token)"].startswith("trials:")
        for r in infer.values()
    )
    assert jt.notes[0].startswith(
        'Cells: median over valid trials (no CI: no group here has the 6 valid trials a CI needs), or "trials: a, b": '
        "each valid trial's value, where a group has fewer than 3 valid trials (no median, no CI)."
    )
    assert "no group here has the 3 valid trials a median needs" not in jt.notes[0]
    # 5 valid trials in each h2d group: medians, none with a CI
    assert h2d.notes[0].startswith("Cells: median over valid trials (no CI: no group here has the 6 valid trials")
    # 6 trials in some groups and 3 in others: medians, some with a CI
    data = make_report_data(kinds=("tinylm",), n_rep=6, failures=False)
    t = data.trials
    rows = t.index[t["variant"] == "tinylm-infer[mode=infer,path=torch]"][:3]
    t.loc[rows, "valid"] = False
    t.loc[rows, "reasons"] = pd.Series([["unstable window: ..."]] * 3, index=rows)
    (jt,) = paper_tables(analyze(data, FAST))
    assert jt.notes[0].startswith(
        "Cells: median [95 % CI] over valid trials (median alone, no CI, below 6 valid trials)."
    )


def test_latex_en_dash_before_a_digit_is_not_a_minus():
    """``3–5`` (a range) is an en dash, ``--`` in LaTeX; its second hyphen was read as a minus
    before the 5 (``3-$-$5``, printed as a hyphen and a minus)."""
    assert latex_escape("batch 3–5") == "batch 3--5"
    assert latex_escape("a–1, –2") == "a--1, --2"
    assert latex_escape("x -1") == "x $-$1"


def test_paper_markdown_keeps_plan_text_as_text(studies):
    """A factor value in a paper.md cell follows report.md's rule: ``|`` stays in its cell and
    ``<`` is no HTML (paper.md escaped only ``|``)."""
    from gcbench.report.render.paper import PaperTable

    t = PaperTable("k", "title", ["regime", "x"], [False, False], [["a|b <img src=x onerror=alert(1)>", "1"]])
    md = to_markdown([t], studies)
    assert "| a\\|b &lt;img src=x onerror=alert(1)> | 1 |" in md
    assert "<img" not in md


def test_paper_tex_names_the_medians_interval_it_prints(studies):
    """The cells' median CI is the order-statistic interval; paper.tex called it a BCa
    bootstrap interval (round-3 kind C22: an interval is named by the method that made it)."""
    tex = to_latex(paper_tables(studies), studies)
    head = [ln for ln in tex.splitlines() if ln.startswith("% Cells:")]
    assert head and "order statistics" in head[0] and "(BCa bootstrap)." not in head[0]
    g = next(
        g for g in studies.groups if "j_per_token" in g.summaries and g.summaries["j_per_token"].ci_low is not None
    )
    assert g.summaries["j_per_token"].ci_method == "order statistics"
