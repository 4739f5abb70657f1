"""Where GC-Bench keeps its files: run ids become folder names one to one (case C19), and
the project's home is found the way git finds its repository (issue 20, item 11)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gcbench import config

# run ids Airflow 3's default allowed_run_id_pattern (^[A-Za-z0-9_.~:+-]+$) accepts
AIRFLOW_IDS = ["exp:1", "exp+1", "exp~1", "exp_1", "nightly.", "nightly", "..", ".", "run", "Exp1", "exp1", "EXP1"]


def test_the_case_run_ids_get_their_own_folders():
    # 7655493: run_key('exp:1') == run_key('exp+1') == 'exp_1', one trial folder and one report for two runs
    assert config.run_key("exp:1") != config.run_key("exp+1")
    assert config.run_dir("k05-collide", "exp:1") != config.run_dir("k05-collide", "exp+1")
    assert config.run_key("exp_1") == "exp_1"  # a safe id stays readable as it is


def test_run_keys_are_one_to_one_even_on_case_insensitive_file_systems():
    ids = [*AIRFLOW_IDS, "manual__2026-11-29T23:31:50.116326+00:00", "manual__2026-11-29T23_31_50.116326_00_00"]
    keys = [config.run_key(i) for i in ids]
    assert len({k.lower() for k in keys}) == len(ids)  # macOS and Windows fold case
    for key in keys:
        assert re.fullmatch(r"[A-Za-z0-9_.~-]+", key) and key not in (".", "..") and len(key) <= 113


def test_a_run_key_with_a_hash_names_its_exact_id():
    key = config.run_key("manual__2026-11-29T23:31:50.116326+00:00")
    assert key == "manual__2026-11-29T23_31_50.116326_00_00~007b143be608"
    assert config.legacy_run_key("manual__2026-11-29T23:31:50.116326+00:00") == key.split("~")[0]


@pytest.mark.parametrize("run_id", ["interrupted.json", "con", "x" * 101])
def test_ids_that_name_another_file_or_device_or_are_too_long_are_hashed(run_id):
    # runs/<plan>/interrupted.json is the plan's interruption record; CON is a device on Windows
    key = config.run_key(run_id)
    assert key != run_id and "~" in key and len(key) <= config.KEY_MAX_CHARS + 13


# ----------------------------------------------------------------------------- the project's home (item 11)


def _checkout(root: Path) -> Path:
    (root / "plans").mkdir(parents=True)
    (root / "pyproject.toml").write_text('[project]\nname = "gcbench"\n')
    return root


def test_the_project_is_found_above_the_working_folder_as_git_finds_its_repository(tmp_path, monkeypatch):
    monkeypatch.delenv("GCBENCH_PROJECT_ROOT", raising=False)
    monkeypatch.delenv("GCBENCH_HOME", raising=False)
    root = _checkout(tmp_path / "checkout")
    deep = root / "reports" / "smoke" / "x"
    deep.mkdir(parents=True)
    assert config.locate_project(deep) == (root.resolve(), f"checkout found from {deep.resolve()}")
    monkeypatch.chdir(deep)
    assert config.home() == root.resolve() / ".gcbench"  # 7655493: deep/.gcbench, empty
    assert not (deep / ".gcbench").exists()


def test_a_gcbench_folder_with_results_marks_the_project_an_empty_one_does_not(tmp_path, monkeypatch):
    monkeypatch.delenv("GCBENCH_PROJECT_ROOT", raising=False)
    outer = _checkout(tmp_path / "outer")
    inner = outer / "work"
    (inner / ".gcbench").mkdir(parents=True)  # left empty by an earlier command run here
    assert config.locate_project(inner)[0] == outer.resolve()
    (inner / ".gcbench" / "pgdata").mkdir()
    (inner / ".gcbench" / "pgdata" / "PG_VERSION").write_text("18\n")
    assert config.locate_project(inner) == (inner.resolve(), ".gcbench/ in the working folder")


def test_outside_any_checkout_the_installed_checkout_is_used_and_the_env_wins(tmp_path, monkeypatch):
    monkeypatch.delenv("GCBENCH_PROJECT_ROOT", raising=False)
    nowhere = tmp_path / "nowhere"
    nowhere.mkdir()
    installed = Path(config.__file__).resolve().parents[2]  # this test's checkout (editable install)
    assert config.locate_project(nowhere) == (installed, "the checkout gcbench is installed from")
    monkeypatch.setenv("GCBENCH_PROJECT_ROOT", str(tmp_path))
    assert config.locate_project(nowhere) == (tmp_path.resolve(), "GCBENCH_PROJECT_ROOT")
