"""``fwbench memory-index``: every memory campaign's cells in one table, with the verdicts each
report's own sentences give, read from the reports' memory_curve.csv."""

import json

from fwbench.families.memory import memory_curve, memory_curve_words, memory_index
from tests.conftest import run_cli
from tests.test_memory_seed import _timed_meas


def _write_report(root, name, table, run_id):
    tables = root / name / "tables"
    tables.mkdir(parents=True)
    table.to_csv(tables / memory_index.CURVE_CSV, index=False)
    (root / name / "content.json").write_text(json.dumps({"campaign": name, "run_id": run_id}))


def _reports(tmp_path):
    """Two reports of one cell: one whose trials put the time model 10% off, one whose trials
    (rounds spread both ways) are too few for their interval to stay inside the 5% bar."""
    root = tmp_path / "report"
    beyond = memory_curve.curve_table(_timed_meas(1.1, {1: [100.0] * 3, 2: [100.0] * 3}))
    spread = memory_curve.curve_table(
        _timed_meas(1.0, {1: [92.0, 100.0, 108.0], 2: [95.0, 104.0, 101.0]})
    )
    _write_report(root, "b_rounds", beyond, "run2")
    _write_report(root, "a_spread", spread, "run1")
    return root, {"b_rounds": beyond, "a_spread": spread}


def test_the_index_gives_each_report_its_own_verdicts(tmp_path):
    root, tables = _reports(tmp_path)
    index = memory_index.index_table(root)
    assert list(index.report) == ["a_spread", "b_rounds"]
    assert list(index.run_id) == ["run1", "run2"]
    rows = index.set_index("report")
    # the same verdict as the report's own sentence over the same table
    for name, table in tables.items():
        text = " ".join(memory_curve_words.sentences(table))
        assert f"each within 5%: {rows.loc[name, 'time_bar']}." in text
    assert rows.loc["b_rounds", "time_bar"] == "no"
    # +10% in each of its two quiet trials: the interval over trials has no width
    assert rows.loc["b_rounds", "time_worst"] == (
        "+10.0% [+10.0%, +10.0%] at mu_two@0.5 over 2 trials (+10.0%, +10.0%)"
    )
    assert rows.loc["a_spread", "time_bar"] == "not shown"
    # within +33%: our plan at 0.5 (+10%, 60% saved); every checkpointing point costs more
    assert rows.loc["a_spread", "ours"].startswith("60.0% at +10.0%")
    # chosen among the cell's two μ-TWO points, after Holm (trials that agree exactly: p 0)
    assert rows.loc["a_spread", "ours"].endswith("(mu_two@0.5; meets, Holm p 0 of 2)")
    assert rows.loc["a_spread", "checkpoint"] == "none within +33%"
    assert rows.loc["a_spread", "trials"] == 3

    text = memory_index.markdown(index)
    assert "| ResNet-152 | 8 | [a_spread](report/a_spread/report.md) (run1) | cpu X | 3 |" in text
    assert len(text.splitlines()) == 2 + len(index)


def test_cells_beside_another_of_their_model_are_named_by_the_settings_that_differ():
    names = memory_index._short_names(
        memory_curve.pd.Series(["batch_sizes=4-8__seq_len=128", "batch_sizes=4-8__seq_len=512"])
    )
    assert list(names) == ["seq_len=128", "seq_len=512"]


def test_the_command_rewrites_only_its_block_and_refuses_bad_input(tmp_path):
    root, _ = _reports(tmp_path)
    readme = tmp_path / "README.md"
    begin, end = "<!-- results:memory_index:start -->", "<!-- results:memory_index:end -->"
    readme.write_text(f"# title\n\n{begin}\nold\n{end}\n\ntail\n")
    proc = run_cli("memory-index", "--reports", root, "--readme", readme)
    assert proc.returncode == 0, proc.stderr
    text = readme.read_text()
    assert "old" not in text and text.startswith("# title") and text.endswith("\ntail\n")
    assert "[b_rounds](report/b_rounds/report.md) (run2)" in text
    again = run_cli("memory-index", "--reports", root, "--readme", readme)
    assert again.returncode == 0 and "already up to date" in again.stdout
    assert readme.read_text() == text

    printed = run_cli("memory-index", "--reports", root)
    assert printed.returncode == 0 and "| a_spread" not in printed.stdout
    assert f"[a_spread]({root.as_posix()}/a_spread/report.md)" in printed.stdout

    # bad input: one line, exit 2, nothing written
    plain = tmp_path / "PLAIN.md"
    plain.write_text("no markers\n")
    refused = run_cli("memory-index", "--reports", root, "--readme", plain)
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
    assert plain.read_text() == "no markers\n"
    (tmp_path / "empty").mkdir()
    none = run_cli("memory-index", "--reports", tmp_path / "empty")
    assert none.returncode == 2 and "no report under" in none.stderr
    assert len(none.stderr.strip().splitlines()) == 1
