"""The committed Figure 1 records (results/fig1) redraw from a fresh clone and are complete records."""

from __future__ import annotations

import csv
import fnmatch
import json
import os
import re
import sys
from pathlib import Path

import pytest

from suPER import cli
from suPER.resolve import from_dict

ROOT = Path(__file__).resolve().parent.parent
FIG1 = ROOT / "results" / "fig1"


def _records(folder: Path) -> list[Path]:
    """The run records in a results folder (``plot`` writes its figures into FOLDER/figures, ignored by git)."""
    return sorted(p for p in folder.iterdir() if p.is_dir() and p.name != "figures") if folder.is_dir() else []


RUNS = _records(FIG1)
"""every run record of results/fig1"""

sys.path.insert(0, str(ROOT / "scripts"))
from check_rows import check  # noqa: E402
from collect_records import OPTIONAL_FILES, RECORD_FILES, collect  # noqa: E402
from fig1_tables import COMPANIONS, SECTIONS, replace_tables, tables  # noqa: E402

COMPANION_RUNS = {name: _records(ROOT / "results" / name) for name in COMPANIONS}
"""the run records of the campaign folders beside results/fig1: the deviation pairs (stage 5), the plain-DQN lines
(stage 6)"""
OTHER_RUNS = [run for runs in COMPANION_RUNS.values() for run in runs]

DIRTY_GRID_FILE = ("battle__ddqn_super_gaussian__s[123]", "adversarial_pursuit__ddqn_super_gaussian__s[123]")
"""Runs whose manifests may say ``<commit>-dirty``: session 16 ran them in the worktree pinned at the campaign's
commit with main's experiments/fig1.yaml copied over the tracked one (its ``only:`` list grew; the code was the pinned
commit's). The campaign script has since put that file beside the pinned one, untracked, so later runs are clean."""


def test_there_are_committed_fig1_records() -> None:
    assert RUNS, "results/fig1 holds no run records"


@pytest.mark.parametrize("run", RUNS + OTHER_RUNS, ids=[f"{p.parent.name}/{p.name}" for p in RUNS + OTHER_RUNS])
def test_each_record_is_a_finished_run_with_every_evaluation_once(run: Path) -> None:
    names = {p.name for p in run.iterdir()}
    assert set(RECORD_FILES) <= names <= {*RECORD_FILES, *OPTIONAL_FILES}  # no checkpoints, nothing large
    ok, what = check(run)
    assert ok, what
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "finished" and manifest["grid"] == run.parent.name  # fig1 or a companion's
    commit = manifest["git_commit"]
    if any(fnmatch.fnmatchcase(run.name, g) for g in DIRTY_GRID_FILE):
        commit = commit.removesuffix("-dirty")
    assert re.fullmatch("[0-9a-f]{40}", commit), manifest["git_commit"]
    cfg = from_dict(json.loads((run / "config.json").read_text()))
    assert manifest["run_name"] == run.name and cfg.run.seed == manifest["seed"]
    assert manifest["env_steps"] == cfg.run.num_timesteps


def test_plot_redraws_the_figure_and_table_from_the_records(tmp_path: Path) -> None:
    assert cli.main(["plot", str(FIG1), "--out", str(tmp_path)]) == 0
    assert (tmp_path / "team_return.png").read_bytes()[:4] == b"\x89PNG"
    table = list(csv.DictReader((tmp_path / "final_performance.csv").open()))
    recorded_envs = {from_dict(json.loads((p / "config.json").read_text())).env.name for p in RUNS}
    assert {r["env"] for r in table} == recorded_envs
    assert sum(int(r["runs"]) for r in table) == len(RUNS)  # every record lands in exactly one table row


def test_plot_protocol_keeps_one_protocols_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``plot --protocol paper`` draws the paper protocol's records only, ``ours`` the others, together every record
    once; a protocol that is not one is refused in one line naming the flag."""
    from suPER import plotting

    counted = {}
    for protocol in ("paper", "ours"):
        assert cli.main(["plot", str(FIG1), "--protocol", protocol, "--out", str(tmp_path / protocol)]) == 0
        table = list(csv.DictReader((tmp_path / protocol / "final_performance.csv").open()))
        assert table and all(plotting.is_paper(r["configuration"]) == (protocol == "paper") for r in table)
        counted[protocol] = sum(int(r["runs"]) for r in table)
    assert counted["paper"] + counted["ours"] == len(RUNS)
    capsys.readouterr()
    assert cli.main(["plot", str(FIG1), "--protocol", "both", "--out", str(tmp_path / "both")]) == 2
    assert capsys.readouterr().err.strip() == "error: --protocol: expected ours or paper, got 'both'"
    assert not (tmp_path / "both").exists()


def test_fig1_tables_update_replaces_a_parts_tables_in_order_and_keeps_its_prose() -> None:
    """``fig1_tables.py --update``: the tables between a part's heading and the next are replaced in order, the
    prose around them and everything outside the part stays; a part with another number of tables is refused."""
    text = "# A\n| x |\n\n## Part\nintro\n| a | b |\n|---|---|\n| 1 | 2 |\nbetween\n| c |\n|---|\n## Next\n| y |\n"
    got = replace_tables(text, "## Part", "## Next", ["| new |\n|---|", "| n2 |"])
    assert got == "# A\n| x |\n\n## Part\nintro\n| new |\n|---|\nbetween\n| n2 |\n## Next\n| y |\n"
    with pytest.raises(ValueError, match="expected 1 tables, found 2"):
        replace_tables(text, "## Part", "## Next", ["| only |"])


def test_run_costs_give_each_env_and_protocol_of_the_records_a_row() -> None:
    """``scripts/run_costs.py`` on the records: a row per env and protocol of the never-resumed finished runs
    (``suPER.costs``, tested in tests/test_costs.py)."""
    from run_costs import table

    from suPER.costs import run_cost

    costs = [c for c in map(run_cost, RUNS) if c is not None]
    text = table(FIG1)
    for env, protocol in {(c.env, c.protocol) for c in costs}:
        assert any(line.startswith(f"| {env} | {protocol} |") for line in text.splitlines()), (env, protocol)


KEY_COLUMNS = {"env", "configuration", "SUPER rule", "baseline", "claim", "set back", "set back to ours", "protocol",
               "CPU"}
"""the columns of results.md's Figure 1 tables that name a row; every other column holds the row's numbers"""


def _tables(text: str) -> list[tuple[list[str], list[list[str]]]]:
    """The markdown tables in ``text``, in order: each its header's cells and its rows' cells."""
    tables: list[tuple[list[str], list[list[str]]]] = []
    header = None
    for line in text.splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
            tables.append((header, []))
        elif not set(line) <= set("|-: "):
            tables[-1][1].append(cells)
    return tables


def _rows(text: str) -> dict[tuple[str, ...], list[str]]:
    """Markdown table rows by their table's place in ``text`` and their cells under the table's KEY_COLUMNS: a
    final-score row by its env, a claim row by (env, SUPER rule, baseline), a claim recomputed against a deviation
    pair's variant by (env, claim, set back), and so on, whatever the table's width."""
    rows: dict[tuple[str, ...], list[str]] = {}
    for table, (header, body) in enumerate(_tables(text), start=1):
        for cells in body:
            key = (str(table), *(cell for name, cell in zip(header, cells) if name in KEY_COLUMNS))
            assert key not in rows, f"two rows of one table with the key {key[1:]}"
            rows[key] = cells
    return rows


def _section(text: str, start: str, end: str) -> str:
    """The part of ``text`` from the heading ``start`` to the next heading ``end`` (both must be there)."""
    first = text.index(start)
    return text[first:text.index(end, first)]


def _assert_same_tables(doc_text: str, computed_text: str) -> None:
    doc, computed = _rows(doc_text), _rows(computed_text)
    assert sorted(doc) == sorted(computed)
    for key, cells in computed.items():
        assert len(doc[key]) == len(cells) and all(map(_same_cell, doc[key], cells)), (doc[key], cells)


def _same_cell(doc: str, computed: str) -> bool:
    """Equal text, numbers equal to the doc's last printed digit (the bootstrap's floats may differ by a last bit
    from machine to machine, which may round the other way)."""
    number = re.compile(r"[-+]?\d+\.\d+")
    if number.sub("#", doc) != number.sub("#", computed):
        return False
    return all(abs(float(a) - float(b)) <= 1.01 * 10.0 ** -len(a.split(".")[1])
               for a, b in zip(number.findall(doc), number.findall(computed)))


def test_results_md_figure1_tables_hold_the_numbers_of_the_records() -> None:
    """docs/results.md's Figure 1 tables are what ``scripts/fig1_tables.py`` computes from the committed records:
    each protocol's per-seed final scores and claim table, the paper protocol's battle final games and the claims
    judged on them, the verdicts of both protocols side by side, and what each SUPER run relayed; every row there,
    and no row of the doc's tables that the records do not give."""
    from suPER import plotting

    text = (ROOT / "docs" / "results.md").read_text()
    figure1 = _section(text, "## Figure 1: SUPER against the baselines", "\n## ") + "\n## "  # its last part's end
    curves = plotting.load_run_curves(plotting.find_run_folders([FIG1]))
    companions = {name: plotting.load_run_curves(runs) for name, runs in COMPANION_RUNS.items()}
    for part, (start, end) in SECTIONS.items():  # every part `fig1_tables.py --update` writes
        _assert_same_tables(_section(figure1, start, end), tables(curves, FIG1, part, companions))


def test_the_docs_count_each_protocols_runs_as_the_records_do() -> None:
    """The run counts in results.md's and README's Figure 1 prose are retyped after each collection (the tables are
    written by ``fig1_tables.py``): every place that counts a protocol's runs says what results/fig1 holds (a
    record's protocol is ``run.protocol`` in its config.json; runs from before that key are ours)."""
    protocols = [json.loads((run / "config.json").read_text())["run"].get("protocol", "ours") for run in RUNS]
    paper, ours = protocols.count("paper"), protocols.count("ours")
    assert paper + ours == len(RUNS)
    results = " ".join((ROOT / "docs" / "results.md").read_text().split())  # prose wraps anywhere
    readme = " ".join((ROOT / "README.md").read_text().split())
    paper_part = _section(results, "### Under the paper's protocol", "### Under our protocol")
    ours_part = _section(results, "### Under our protocol", "#### Honest notes")
    # the paper protocol's figure caption, its campaign's status and its results' heading
    assert re.findall(r"protocol's (\d+) runs", results[:results.index("### Under our protocol")]) == [str(paper)] * 3
    assert f"#### Results: the protocol's {paper} runs" in paper_part
    assert ours_part.startswith(f"### Under our protocol {ours} runs.")
    assert f"#### Results: the protocol's {ours} runs" in ours_part and f"records of {ours} runs" in ours_part
    assert f"(`results/fig1/`, {paper} runs:" in readme and f"(`--protocol ours`, {ours} runs)" in readme


def test_relay_table_reads_share_all_as_every_row_where_no_sender_dies() -> None:
    """The relay table's run value leaves out the step-0 evaluation (before any relay): off battle (no sender lacks
    rows there) share-all, which relays every row, reads 1 on every run, and quantile and stochastic, which aim at
    b = 0.1, read 0.09-0.115 (the paper's gaussian, on the variance, misses b: 0.188 on adversarial pursuit)."""
    [(header, rows)] = _tables(tables([], FIG1, "relay"))
    env, configuration, fractions = map(header.index, ("env", "configuration", "fraction relayed, per seed"))
    off_battle = [r for r in rows if not r[env].startswith("battle")]
    share_all = [r for r in off_battle if r[configuration] == "share-all"]
    assert share_all and all(v == "1.000" for r in share_all for v in r[fractions].split(", "))
    aimed = [r for r in off_battle if r[configuration] in ("SUPER quantile", "SUPER stochastic")]
    assert aimed and all(0.09 < float(v) < 0.115 for r in aimed for v in r[fractions].split(", "))


def test_collect_copies_new_and_changed_records_and_leaves_the_rest(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """``collect_records.py SRC DST`` (``fig1_campaign.sh --collect``): a finished run new to DST is copied, one DST
    holds already is only counted, one that differs is updated, an unfinished one is skipped; nothing else of the
    run folder (checkpoints) is copied."""
    import shutil

    src, dst = tmp_path / "runs", tmp_path / "results"
    for run in RUNS[:3]:
        shutil.copytree(run, src / run.name)
    (src / RUNS[0].name / "checkpoints").mkdir()
    (src / RUNS[0].name / "checkpoints" / "final.pt").write_bytes(b"weights")
    running = src / "battle__ddqn__s9"
    running.mkdir()
    (running / "manifest.json").write_text(json.dumps({"status": "running"}))
    assert collect(src, dst) == 0
    out = capsys.readouterr().out
    assert f"new {RUNS[0].name}:" in out and "skip battle__ddqn__s9: running" in out
    assert out.splitlines()[-1] == f"3 new, 0 updated, 0 unchanged, 1 skipped -> {dst} (commit the new records)"
    assert sorted(p.name for p in (dst / RUNS[0].name).iterdir()) == sorted(
        n for n in (*RECORD_FILES, *OPTIONAL_FILES) if (RUNS[0] / n).is_file())
    manifest = dst / RUNS[1].name / "manifest.json"
    manifest.write_text(manifest.read_text().replace('"finished"', '"edited"'))
    assert collect(src, dst) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert len(lines) == 3 and "skip battle__ddqn__s9: running" in lines
    assert any(line.startswith(f"updated {RUNS[1].name}: 41 rows") for line in lines)
    assert lines[-1] == f"0 new, 1 updated, 2 unchanged, 1 skipped -> {dst} (commit the new records)"
    assert manifest.read_text() == (src / RUNS[1].name / "manifest.json").read_text()


def test_campaign_status_shows_runs_and_checks_rows(tmp_path: Path) -> None:
    """``scripts/fig1_campaign.sh --worktree DIR --status``: whether a campaign runs, the grids' started runs with
    their progress, each stage's time to go, and every run folder's rows checked, in every campaign folder (here a
    committed record, a run half-way, and a deviation pair's run that has one evaluation)."""
    import shutil
    import subprocess

    wt = tmp_path / "wt"
    (wt / "experiments").mkdir(parents=True)
    for name in ("fig1.yaml", "fig1_paper.yaml", "paper_grid.yaml"):
        shutil.copy(ROOT / "experiments" / name, wt / "experiments" / name)
    shutil.copytree(ROOT / "experiments" / "envs", wt / "experiments" / "envs")
    shutil.copytree(RUNS[0], wt / "runs" / "fig1" / RUNS[0].name)
    half = wt / "runs" / "fig1" / "battle__ddqn__s2"
    half.mkdir()
    (half / "manifest.json").write_text(json.dumps({"status": "interrupted"}))
    (half / "config.json").write_text(json.dumps({"run": {"num_timesteps": 100_000, "eval_points": 40}}))
    (half / "metrics.csv").write_text("env_steps,team_return_mean,wall_time_s\n0,-3,10\n2500,-1,610\n")
    pair = wt / "runs" / "fig1_isolate" / "adversarial_pursuit__ddqn_super_gaussian_variance__s1__paper__shareall_insertmax"
    pair.mkdir(parents=True)
    (pair / "manifest.json").write_text(json.dumps({"status": "running"}))
    (pair / "config.json").write_text(json.dumps({"run": {"num_timesteps": 100_000, "eval_points": 40}}))
    (pair / "metrics.csv").write_text("env_steps,team_return_mean,wall_time_s\n0,-3,10\n")
    r = subprocess.run(["bash", str(ROOT / "scripts" / "fig1_campaign.sh"), "--worktree", str(wt), "--status"],
                       capture_output=True, text=True, timeout=120, env={**os.environ, "RAY_AUTH_MODE": "disabled"})
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] in ("campaign: running", "campaign: not running")
    assert any(RUNS[0].name in ln and "\tfinished\t" in ln for ln in lines)
    assert any("battle__ddqn__s2\tinterrupted 2,500/100,000, ~" in ln for ln in lines)  # time left at its pace
    assert not any("\t-\t" in ln for ln in lines)  # runs not started are left out
    assert "stage 1: 0 of 40 runs finished" in r.stdout and "stage 4: 0 of 16 runs finished" in r.stdout
    assert "stage 5: 0 of 12 runs finished" in r.stdout  # the deviation pairs, from a grid file the worktree lacked
    assert "stage 6: 0 of 27 runs finished" in r.stdout  # the plain-DQN lines, likewise
    assert any(pair.name in ln and "\trunning 0/100,000" in ln for ln in lines)
    # each stage's time to go (grid list's, tests/test_costs.py), then all stages': none finished in this worktree
    assert re.search(r"^  to go: 40 runs \(0 running\), 4,000,000 env steps, ~[\d.]+ h of runs", r.stdout, re.M)
    assert re.search(r"^to go, all stages: 116 runs, ~\d+ h of runs, ~\d+ h two at a time$", r.stdout, re.M)
    assert "3 of 3 run folders have every evaluation row exactly once" in r.stdout
    (half / "metrics.csv").write_text("env_steps,team_return_mean,wall_time_s\n0,-3,10\n2500,-1,610\n2500,-1,610\n")
    r = subprocess.run(["bash", str(ROOT / "scripts" / "fig1_campaign.sh"), "--worktree", str(wt), "--status"],
                       capture_output=True, text=True, timeout=120, env={**os.environ, "RAY_AUTH_MODE": "disabled"})
    assert r.returncode != 0 and "doubled evaluations [1]" in r.stdout  # a resume that logged a row twice


def test_campaign_collect_without_a_campaign_says_so_and_writes_nothing(tmp_path: Path) -> None:
    """``fig1_campaign.sh --worktree DIR --collect`` where no campaign ran: exit 2 with one line naming the folder, and
    nothing created there (a folder at the worktree's place would stop the campaign from creating its worktree)."""
    import subprocess

    wt = tmp_path / "no-campaign"
    r = subprocess.run(["bash", str(ROOT / "scripts" / "fig1_campaign.sh"), "--worktree", str(wt), "--collect"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.splitlines() == [f"fig1_campaign.sh: --collect: no campaign under {wt}/runs: expected the "
                                     "--worktree DIR of a started campaign"]
    assert not wt.exists()


def test_plot_analysis_on_the_records_reads_shipped_random_returns_and_says_what_it_does(tmp_path: Path) -> None:
    """``super-marl plot results/fig1 --analysis`` through the real CLI: each phase is announced on stderr, the
    random-policy returns come from experiments/random_returns.json (nothing measured), and the claim table holds
    every claim of the records with Holm-adjusted p, TOST, window verdicts and the seeds column."""
    import subprocess

    from suPER import analysis, plotting

    r = subprocess.run([sys.executable, "-m", "suPER.cli", "plot", str(FIG1), "--analysis", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=600, env={**os.environ, "RAY_AUTH_MODE": "disabled"})
    assert r.returncode == 0, r.stderr
    assert "analysis: final scores of" in r.stderr and "analysis: claim table (Holm per env" in r.stderr
    assert "measuring" not in r.stderr  # the shipped measurements cover the records' env configurations
    rows = list(csv.DictReader((tmp_path / "claims.csv").open()))
    scores = analysis.scores_by_configuration(plotting.load_run_curves(plotting.find_run_folders([FIG1])))
    assert len(rows) == sum(len(analysis.claims(list(by_cfg))) for by_cfg in scores.values())
    for row in rows:
        assert row["verdict"] in (analysis.HOLDS, analysis.FAILS, analysis.EQUIVALENT, analysis.INCONCLUSIVE)
        p, p_holm = float(row["welch_p"]), float(row["welch_p_holm"])
        assert (p_holm >= p) if p == p else (p_holm != p_holm and row["verdict"] == analysis.INCONCLUSIVE)  # NaN: 1 run
        assert row["fragile"] in ("True", "False")
        assert row["verdicts_by_window"].count(":") == len(analysis.WINDOWS) - 1  # the others than the verdict's
    assert not (tmp_path / "random_returns.json").exists()


def test_the_dqn_part_claims_the_plain_dqn_lines_among_themselves(tmp_path: Path) -> None:
    """``fig1_tables.py --protocol dqn`` on plain-DQN runs (experiments/fig1_dqn.yaml's labels): their final scores
    per seed and SUPER quantile's claims against no sharing and share-all; Figure 1's DDQN runs passed beside them
    stay out."""
    import numpy as np

    from suPER import plotting

    def run(label: str, seed: int, score: float) -> plotting.RunCurve:
        return plotting.RunCurve("battle", label, seed, np.arange(10) * 100.0, np.full(10, score),
                                 str(tmp_path / f"{label}{seed}"))

    dqn = [run(label, s, score + s) for s in (1, 2, 3) for label, score in (
        ("dqn (paper)", 0.0), ("dqn_super_quantile (paper)", 30.0),
        ("dqn_super_gaussian_variance (paper) [shareall]", 10.0))]
    text = tables([run("ddqn (paper)", 1, 99.0)], FIG1, "dqn", {"fig1_dqn": dqn})
    assert "| battle (100k) | +1.0, +2.0, +3.0 | +31.0, +32.0, +33.0 | +11.0, +12.0, +13.0 |" in text
    claims = [line for line in text.splitlines() if line.startswith("| battle | quantile |")]
    assert [c.split(" | ")[2] for c in claims] == ["no sharing", "share-all"]
    assert all(" | 3 vs 3 | " in c for c in claims)
    assert "| battle | quantile | no sharing | 3 vs 3 | +30.0 |" in claims[0]
    assert "+99.0" not in text and "parameter sharing" not in text


def test_the_pair_tables_read_a_claim_with_its_baseline_and_with_both_sides_set_back(tmp_path: Path) -> None:
    """``fig1_tables.py --protocol compare`` on pursuit's deviation pairs (experiments/fig1_isolate.yaml: no sharing,
    SUPER quantile and share-all under the paper protocol with our insertion priority) beside the paper runs they pair
    with, as run folders with the grids' real configs: each configuration's per-seed effect, and each claim with its
    baseline set back and with both sides set back. Final scores (constant curves): no sharing 100 + 10 s, its variant
    50 + 10 s; SUPER quantile 200 + 10 s, its variant 260 + 10 s; share-all 150 + 10 s, its variant 140 + 10 s."""
    from suPER import plotting
    from suPER.campaigns.grid import GridRun, load_grid

    scores = {"pursuit-ddqn": (100.0, 50.0), "pursuit-ddqn-super-quantile": (200.0, 260.0),
              "pursuit-ddqn-shareall": (150.0, 140.0)}

    def write(root: Path, run: GridRun, score: float) -> None:
        folder = root / run.run_name
        folder.mkdir(parents=True)
        (folder / "config.json").write_text(json.dumps(run.config().to_dict()))
        (folder / "manifest.json").write_text(json.dumps({"status": "finished", "seed": run.seed}))
        rows = "".join(f"{i * 5000},{score!r},{i}\n" for i in range(10))
        (folder / "metrics.csv").write_text("env_steps,team_return_mean,wall_time_s\n" + rows)

    for run in load_grid(ROOT / "experiments" / "fig1_paper.yaml", seeds=3).runs:
        if run.entry in scores:
            write(tmp_path / "paper", run, scores[run.entry][0] + 10 * run.seed)
    for run in load_grid(ROOT / "experiments" / "fig1_isolate.yaml", seeds=3).runs:
        if run.entry.removesuffix("-insertmax") in scores:
            write(tmp_path / "pairs", run, scores[run.entry.removesuffix("-insertmax")][1] + 10 * run.seed)
    curves, variants = (plotting.load_run_curves(plotting.find_run_folders([tmp_path / d])) for d in ("paper", "pairs"))
    assert len(curves) == len(variants) == 9
    text = tables(curves, FIG1, "compare", {"fig1_isolate": variants})
    deviation = "relay.insertion_priority: legacy -> max"
    assert (f"| pursuit | no sharing | {deviation} | 3 | s1 +110.0, s2 +120.0, s3 +130.0 | s1 +60.0, s2 +70.0, s3 +80.0 | "
            "s1 -50.0, s2 -50.0, s3 -50.0 | -50.0 ") in text
    assert f"| pursuit | SUPER quantile | {deviation} | 3 | " in text and "| +60.0 [60.0, 60.0] | " in text
    # the claims recomputed against the variants: claim, set back, and the variant's runs and difference beside it
    [(header, body)] = [table for table in _tables(text) if "against the variant: runs" in table[0]]
    env, claim, set_back, at = map(header.index, ("env", "claim", "set back", "against the variant: runs"))
    recomputed = {(cells[claim], cells[set_back], cells[at], cells[at + 1]) for cells in body
                  if cells[env] == "pursuit" and cells[claim].startswith("quantile - ")}
    # IQM of 3 runs is the middle one: SUPER quantile 220 (its variant 280) against 120 / 70 and 170 / 160
    assert recomputed == {("quantile - no sharing", "baseline", "3 vs 3", "+150.0"),
                          ("quantile - no sharing", "both sides", "3 vs 3", "+210.0"),
                          ("quantile - share-all", "baseline", "3 vs 3", "+60.0"),
                          ("quantile - share-all", "both sides", "3 vs 3", "+120.0")}
    # one finished pair: its difference is the mean, with no interval and no p to give
    first = tables(curves, FIG1, "compare", {"fig1_isolate": [c for c in variants if c.seed == 1]})
    assert f"| pursuit | no sharing | {deviation} | 1 | s1 +110.0 | s1 +60.0 | s1 -50.0 | -50.0 | - |" in first
