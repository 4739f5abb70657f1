"""gcbench.airflow_local without starting Airflow: the plugin is installed once, the
config ``up`` writes, URLs, and stopping a process tree."""

from __future__ import annotations

import configparser
import os
import subprocess
import sys
import time
from pathlib import Path

from gcbench import airflow_local

REPO = Path(__file__).resolve().parents[1]


def test_the_gcbench_plugin_reaches_airflow_once():
    # an egg-info on sys.path (plugins/) made Airflow load the entry point twice:
    # "Plugin 'gcbench' already registered, skipping" on the UI's home page
    from airflow._shared.module_loading import entry_points_with_dist

    assert not list((REPO / "plugins").glob("*.egg-info"))
    found = [dist for ep, dist in entry_points_with_dist("airflow.plugins") if ep.name == "gcbench"]
    assert len(found) == 1
    assert airflow_local.duplicate_distributions() == []


def test_a_socket_url_becomes_a_sqlalchemy_url():
    url = airflow_local.sqlalchemy_url("postgresql://postgres:@/airflow?host=/tmp/pg-sock")
    assert url == "postgresql+psycopg2://postgres@/airflow?host=/tmp/pg-sock"
    assert (
        airflow_local.sqlalchemy_url("postgresql://u:p%40ss@db.example:5433/af")
        == "postgresql+psycopg2://u:p%40ss@db.example:5433/af"
    )


def test_up_writes_a_config_for_the_local_ui(tmp_path, monkeypatch):
    monkeypatch.setenv("GCBENCH_PROJECT_ROOT", str(REPO))
    (tmp_path / "airflow.cfg").write_text("[core]\nload_examples = True\n")  # e.g. from airflow standalone
    cfg_path = airflow_local.write_config(tmp_path, 18080, "postgresql+psycopg2://postgres@/airflow?host=/t%x")
    assert (tmp_path / "airflow.cfg.bak").read_text().startswith("[core]")
    cfg = configparser.ConfigParser(interpolation=configparser.BasicInterpolation())
    cfg.read(cfg_path)
    assert cfg["core"]["dags_folder"] == str(REPO / "dags")
    assert cfg["core"]["load_examples"] == "False" and cfg["core"]["executor"] == "LocalExecutor"
    assert cfg["database"]["sql_alchemy_conn"] == "postgresql+psycopg2://postgres@/airflow?host=/t%x"
    assert cfg["api"]["host"] == "127.0.0.1" and cfg["api"]["base_url"] == "http://127.0.0.1:18080"
    # the next trial task is queued within 0.25 s of the previous one's end, not Airflow's 1 s
    assert float(cfg["scheduler"]["scheduler_idle_sleep_time"]) == airflow_local.SCHEDULER_IDLE_SLEEP_S == 0.25
    passwords = Path(cfg["core"]["simple_auth_manager_passwords_file"])
    assert passwords.stat().st_mode & 0o777 == 0o600 and len(passwords.read_text()) > 20
    assert (tmp_path / "airflow.cfg").stat().st_mode & 0o777 == 0o600
    password, jwt = passwords.read_text(), cfg["api_auth"]["jwt_secret"]
    again = airflow_local.write_config(tmp_path, 18081, "sqlite:///x.db")  # ours: rewritten, secrets kept
    cfg.read(again)
    assert passwords.read_text() == password and cfg["api_auth"]["jwt_secret"] == jwt
    assert (tmp_path / "airflow.cfg.bak").read_text().startswith("[core]")  # the user's file is not lost
    assert "port = 18081" in again.read_text()


TREE = """
import subprocess, sys, time, signal
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # like a scheduler that ignores SIGTERM for a while
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
print(child.pid, flush=True)
time.sleep(600)
"""


def test_terminate_reaches_descendants_in_other_sessions_and_kills_after_the_grace():
    import psutil

    proc = subprocess.Popen([sys.executable, "-c", TREE], stdout=subprocess.PIPE, text=True, start_new_session=True)
    child = int(proc.stdout.readline())
    record = {"name": "scheduler", "pid": proc.pid, "pgid": proc.pid, "started": psutil.Process(proc.pid).create_time()}
    assert airflow_local._alive(record)
    started = time.monotonic()
    stopped = airflow_local._terminate([record], grace_s=1.0, log=lambda m: None)
    proc.wait(10)
    assert stopped == 2 and time.monotonic() - started < 15
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE
    assert not airflow_local._alive(record)
    assert not airflow_local._alive({**record, "started": record["started"] - 100})  # a reused pid is not ours


def test_down_with_nothing_running_says_so(tmp_path):
    lines = []
    assert airflow_local.down(home=tmp_path, log=lines.append) == 0
    assert lines == ["nothing to stop: gcbench airflow up is not running"]


def test_the_holder_usage_is_checked():
    out = subprocess.run(
        [sys.executable, "-m", "gcbench.airflow_local"], capture_output=True, text=True, env={**os.environ}, timeout=60
    )
    assert out.returncode == 2 and "usage" in out.stderr
