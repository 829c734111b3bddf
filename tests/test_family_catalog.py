"""A family is one folder: adding one touches its folder, its notebook and its tests. A demo family
put on the families package's path is found by the catalog, named by its notebook and placed in
the report's outline before the run's own history, with no line anywhere else."""

import importlib
import sys

from fwbench import families, vocab

DEMO_REPORT = '''"""Demo (16_demo): a family that only a test adds."""

from fwbench.report.items import Note, Section

DEMO = Section("Demo", "A family added by its folder alone.", (Note("Nothing measured."),))
SECTIONS = (DEMO,)
'''


def test_a_new_family_is_its_folder_its_notebook_and_its_tests(tmp_path, monkeypatch):
    room = tmp_path / "demo"
    room.mkdir()
    (room / "__init__.py").write_text('"""Demo (16_demo): a family that only a test adds."""\n')
    (room / "demo_report.py").write_text(DEMO_REPORT)
    from fwbench.publish import catalog, outline

    before = [section.title for section in outline.SECTIONS]
    monkeypatch.setattr(families, "__path__", [*families.__path__, str(tmp_path)])
    try:
        importlib.reload(catalog)
        importlib.reload(outline)
        assert vocab.family_of("16_demo") == "demo"
        assert catalog.BY_FAMILY["demo"].__name__ == "fwbench.families.demo.demo_report"
        titles = [section.title for section in outline.SECTIONS]
        # every section it had, in its order, with the demo's after the placed families and
        # before the run's own history
        assert [t for t in titles if t != "Demo"] == before
        assert titles.index("Demo") == before.index("History")
    finally:
        monkeypatch.undo()
        for name in [n for n in sys.modules if n.startswith("fwbench.families.demo")]:
            del sys.modules[name]
        importlib.reload(catalog)
        importlib.reload(outline)
    assert "demo" not in catalog.BY_FAMILY
    assert [section.title for section in outline.SECTIONS] == before


def test_a_notebooks_name_says_its_family_unless_the_vocabulary_names_another():
    assert vocab.family_of("10_inference") == "inference"
    assert vocab.family_of("/repo/notebooks/14_web_audio.py") == "web_audio"
    assert vocab.family_of("15_time_to_accuracy") == "training"
    assert vocab.family_of("21_orders") == "analysis"
    assert vocab.family_of("21_prediction") == "prediction"
    assert vocab.family_of("scratch") == "unknown"
