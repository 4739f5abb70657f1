"""PowerCap against NVML mocked at its boundary: the pynvml functions only."""

import pynvml
import pytest

from gcbench.energy.powercap import (
    PowerCap,
    PowerCapPermissionError,
    PowerCapRangeError,
    PowerCapRestoreError,
    PowerCapUnavailableError,
)
from gcbench.errors import SkipTrial


class FakeNvml:
    """GPUs with an H200's limits: 200-700 W, current 700 W (values in mW, as NVML)."""

    def __init__(self, n=2, min_mw=200_000, max_mw=700_000, current_mw=700_000):
        self.limits = {i: current_mw for i in range(n)}
        self.min_mw, self.max_mw = min_mw, max_mw
        self.set_calls: list[tuple[int, int]] = []
        self.deny_set: set[int] = set()
        self.fail_restore = False
        self.initialised = 0

    def install(self, monkeypatch):
        def handle(i):
            if i not in self.limits:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            return ("handle", i)

        def set_limit(h, mw):
            i = h[1]
            if i in self.deny_set:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)
            if self.fail_restore and mw == 700_000:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
            self.set_calls.append((i, mw))
            self.limits[i] = mw

        def init():
            self.initialised += 1

        def shutdown():
            self.initialised -= 1

        monkeypatch.setattr(pynvml, "nvmlInit", init)
        monkeypatch.setattr(pynvml, "nvmlShutdown", shutdown)
        monkeypatch.setattr(pynvml, "nvmlDeviceGetHandleByIndex", handle)
        monkeypatch.setattr(pynvml, "nvmlDeviceGetPowerManagementLimit", lambda h: self.limits[h[1]])
        monkeypatch.setattr(
            pynvml, "nvmlDeviceGetPowerManagementLimitConstraints", lambda h: [self.min_mw, self.max_mw]
        )
        monkeypatch.setattr(pynvml, "nvmlDeviceSetPowerManagementLimit", set_limit)
        monkeypatch.setattr(pynvml, "nvmlDeviceGetEnforcedPowerLimit", lambda h: self.limits[h[1]])
        return self


@pytest.fixture
def nvml(monkeypatch):
    return FakeNvml().install(monkeypatch)


def test_cap_is_applied_in_milliwatts_and_restored(nvml):
    with PowerCap(250, [0, 1]) as cap:
        assert nvml.limits == {0: 250_000, 1: 250_000}
        assert [a.previous_w for a in cap.applied] == [700.0, 700.0]
        assert cap.metrics() == {
            "power_cap_w": 250.0,
            "power_cap_state": "applied",
            "power_limit_enforced_w": 250.0,
            "power_limit_previous_w": 700.0,
        }
    assert nvml.limits == {0: 700_000, 1: 700_000}
    assert nvml.initialised == 0


def test_cap_is_restored_when_the_trial_fails_midway(nvml):
    with pytest.raises(RuntimeError, match="CUDA out of memory"):
        with PowerCap(200, [0, 1]):
            assert nvml.limits[0] == 200_000
            raise RuntimeError("CUDA out of memory")
    assert nvml.limits == {0: 700_000, 1: 700_000}
    assert nvml.set_calls[-2:] == [(1, 700_000), (0, 700_000)]


def test_cap_is_restored_on_keyboard_interrupt(nvml):
    with pytest.raises(KeyboardInterrupt):
        with PowerCap(300, [0]):
            raise KeyboardInterrupt
    assert nvml.limits[0] == 700_000


def test_previous_non_default_limit_is_what_comes_back(monkeypatch):
    nvml = FakeNvml(n=1, current_mw=450_000).install(monkeypatch)
    with PowerCap(250, [0]):
        pass
    assert nvml.limits[0] == 450_000


def test_no_permission_skips_the_trial_with_cap_sys_admin_reason(nvml):
    nvml.deny_set = {0, 1}
    with pytest.raises(PowerCapPermissionError) as info:
        with PowerCap(250, [0, 1]):
            pytest.fail("body must not run uncapped")
    assert isinstance(info.value, SkipTrial)
    assert "CAP_SYS_ADMIN" in info.value.skip_reason and "gpu0" in info.value.skip_reason
    assert nvml.limits == {0: 700_000, 1: 700_000}


def test_permission_refused_on_second_gpu_restores_the_first(nvml):
    nvml.deny_set = {1}
    with pytest.raises(PowerCapPermissionError, match="gpu1"):
        with PowerCap(250, [0, 1]):
            pytest.fail("body must not run half capped")
    assert nvml.limits == {0: 700_000, 1: 700_000}
    assert nvml.set_calls == [(0, 250_000), (0, 700_000)]
    assert nvml.initialised == 0


@pytest.mark.parametrize("cap_w", [150, 701])
def test_cap_outside_the_gpu_range_is_skipped_untouched(nvml, cap_w):
    with pytest.raises(PowerCapRangeError, match="200-700 W"):
        with PowerCap(cap_w, [0]):
            pass
    assert nvml.set_calls == []


def test_no_cap_touches_nothing(monkeypatch):
    def boom(*a):
        raise AssertionError("NVML must not be called without a cap")

    monkeypatch.setattr(pynvml, "nvmlInit", boom)
    with PowerCap(None, [0]) as cap:
        assert cap.metrics()["power_cap_w"] is None


def test_cap_without_gpu_is_skipped(nvml):
    with pytest.raises(PowerCapUnavailableError):
        with PowerCap(250, []):
            pass


def test_failed_restore_raises_after_a_clean_body_but_never_masks_a_failure(nvml):
    nvml.fail_restore = True
    with pytest.raises(PowerCapRestoreError, match="gpu0"):
        with PowerCap(250, [0]):
            pass
    with pytest.raises(ValueError, match="original"):
        with PowerCap(250, [0]):
            raise ValueError("original")
