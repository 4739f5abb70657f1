"""GPU leases (gcbench.store.gpulock) on a real PostgreSQL server: two trials never hold
the same GPU, waits are logged and bounded, and a lease dies with its holder."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from gcbench.store import gpulock

pytestmark = pytest.mark.integration


def test_keys_are_per_host_gpu_and_taken_in_one_order():
    assert gpulock.gpu_keys([1, 0], host="h200a") == ["h200a/gpu0", "h200a/gpu1"]
    assert gpulock.gpu_keys([0, 0], host="h") == ["h/gpu0"]
    assert gpulock.gpu_keys([], host="h") == []


def test_host_name_comes_from_gcbench_gpu_host(monkeypatch):
    monkeypatch.setenv("GCBENCH_GPU_HOST", "node-7")
    assert gpulock.gpu_keys([3]) == ["node-7/gpu3"]


def test_lock_timeout_is_read_from_the_environment(monkeypatch):
    monkeypatch.delenv("GCBENCH_GPU_LOCK_TIMEOUT_S", raising=False)
    assert gpulock.lock_timeout_s() == gpulock.DEFAULT_TIMEOUT_S
    monkeypatch.setenv("GCBENCH_GPU_LOCK_TIMEOUT_S", "90")
    assert gpulock.lock_timeout_s() == 90.0
    monkeypatch.setenv("GCBENCH_GPU_LOCK_TIMEOUT_S", "-1")
    with pytest.raises(gpulock.GCBenchError, match="GCBENCH_GPU_LOCK_TIMEOUT_S='-1'"):
        gpulock.lock_timeout_s()


def test_a_two_gpu_trial_waits_for_the_one_gpu_trial_on_its_first_gpu(pg_url, monkeypatch):
    monkeypatch.setattr(gpulock, "ATTEMPT_S", 0.2)
    events: list[tuple[str, float]] = []
    waiting_lines: list[str] = []
    with gpulock.hold_gpus([0], "trial A", host="h", url=pg_url, log=lambda m: None) as a:
        assert a.keys == ["h/gpu0"] and a.alive()

        def second() -> None:
            with gpulock.hold_gpus([1, 0], "trial B", host="h", url=pg_url, log=waiting_lines.append) as b:
                events.append(("B leased", time.monotonic()))
                assert b.keys == ["h/gpu0", "h/gpu1"] and b.wait_s >= 0.9

        t = threading.Thread(target=second)
        t.start()
        time.sleep(1.0)
        assert not events  # gpu0 is held by A
        released = time.monotonic()
    t.join(30)
    assert events and events[0][1] >= released
    assert any(line.startswith("waiting for GPU h/gpu0") and "gcbench trial A" in line for line in waiting_lines)
    assert waiting_lines[-1].startswith("GPUs h/gpu0, h/gpu1 leased after waiting")


def test_other_gpus_and_other_hosts_do_not_wait(pg_url):
    with gpulock.hold_gpus([0], "A", host="h", url=pg_url, log=lambda m: None):
        with gpulock.hold_gpus([1], "B", host="h", url=pg_url, log=lambda m: None) as b:
            assert b.wait_s < 1.0
        with gpulock.hold_gpus([0], "C", host="other", url=pg_url, log=lambda m: None) as c:
            assert c.wait_s < 1.0


def test_a_wait_past_the_timeout_is_an_error_naming_the_holder(pg_url, monkeypatch):
    monkeypatch.setattr(gpulock, "ATTEMPT_S", 0.2)
    with gpulock.hold_gpus([2], "trial X of dag run r1", host="h", url=pg_url, log=lambda m: None):
        started = time.monotonic()
        with pytest.raises(gpulock.GpuBusyError, match=r"GPU h/gpu2 still in use after waiting .* gcbench trial X"):
            with gpulock.hold_gpus([2], "trial Y", host="h", url=pg_url, timeout_s=1.0, log=lambda m: None):
                pass
        assert time.monotonic() - started < 10


def test_a_stop_request_gives_up_the_wait(pg_url, monkeypatch):
    monkeypatch.setattr(gpulock, "ATTEMPT_S", 0.2)
    with gpulock.hold_gpus([3], "A", host="h", url=pg_url, log=lambda m: None):
        with pytest.raises(gpulock.LeaseAborted):
            with gpulock.hold_gpus([3], "B", host="h", url=pg_url, log=lambda m: None, should_stop=lambda: True):
                pass


HOLDER = textwrap.dedent("""
    import sys, time
    from gcbench.store import gpulock
    with gpulock.hold_gpus([0], "killed holder", host="h", url=sys.argv[1], log=lambda m: None):
        print("held", flush=True)
        time.sleep(600)
""")


def test_the_lease_dies_with_its_holder_killed_by_sigkill(pg_url, monkeypatch):
    monkeypatch.setattr(gpulock, "ATTEMPT_S", 0.2)
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, pg_url], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        with pytest.raises(gpulock.GpuBusyError):
            with gpulock.hold_gpus([0], "B", host="h", url=pg_url, timeout_s=0.5, log=lambda m: None):
                pass
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        with gpulock.hold_gpus([0], "B", host="h", url=pg_url, timeout_s=10, log=lambda m: None) as b:
            assert b.wait_s < 10
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_trial_measuring_host_wide_energy_runs_alone_on_its_host(pg_url, monkeypatch):
    # C13: RAPL counts the whole socket; a trial on gpu1 waits while a RAPL-measuring trial holds gpu0
    monkeypatch.setattr(gpulock, "ATTEMPT_S", 0.2)
    quiet = lambda m: None  # noqa: E731
    with gpulock.hold_gpus([0], "rapl trial", host="h", url=pg_url, log=quiet, host_energy=True) as a:
        assert (a.host_key, a.host_exclusive) == ("h/host-energy", True)
        with pytest.raises(gpulock.GpuBusyError, match=r"host lock h/host-energy still in use .* gcbench rapl trial"):
            with gpulock.hold_gpus([1], "B", host="h", url=pg_url, timeout_s=0.6, log=quiet):
                pass
        with pytest.raises(gpulock.GpuBusyError):  # nor a trial without a GPU: its process loads the socket too
            with gpulock.hold_gpus([], "cpu only", host="h", url=pg_url, timeout_s=0.6, log=quiet):
                pass
        with gpulock.hold_gpus([1], "C", host="other", url=pg_url, log=quiet) as c:  # another host's socket
            assert c.wait_s < 1.0


def test_trials_not_measuring_host_wide_energy_share_the_host(pg_url, monkeypatch):
    monkeypatch.setattr(gpulock, "ATTEMPT_S", 0.2)
    quiet = lambda m: None  # noqa: E731
    with gpulock.hold_gpus([0], "A", host="h", url=pg_url, log=quiet):
        with gpulock.hold_gpus([1], "B", host="h", url=pg_url, log=quiet) as b:
            assert b.wait_s < 1.0 and not b.host_exclusive
            with pytest.raises(gpulock.GpuBusyError):  # a measuring trial waits for both
                with gpulock.hold_gpus([2], "rapl", host="h", url=pg_url, timeout_s=0.6, log=quiet, host_energy=True):
                    pass
