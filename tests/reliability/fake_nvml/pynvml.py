"""A stand-in for NVIDIA's ``pynvml`` (nvidia-ml-py) at its module boundary, for trials
run as real processes on a machine without a GPU.

Put this folder first on ``PYTHONPATH`` and ``gcbench.energy.nvml`` imports it instead of
the real bindings, in the trial process and in its sampler. It models one H200-like GPU
at 120 W: the energy counter (mJ) steps by 12 J every 100 ms of ``time.monotonic()``
(one clock for every process), instant and average power 120 W.

Its process list (``nvmlDeviceGetComputeRunningProcesses``) holds the caller's parent
(in the sampler: the trial process, which a CUDA trial would be) and, when
``GCBENCH_FAKE_NVML_FOREIGN_PID`` is set, that PID too: a process of someone else on
the GPU.
"""

from __future__ import annotations

import os
import time
from types import SimpleNamespace

NVML_ERROR_NOT_SUPPORTED = 3
NVML_DEVICE_MIG_ENABLE = 1
NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1
NVML_FI_DEV_POWER_AVERAGE = 185
NVML_FI_DEV_POWER_INSTANT = 186
NVML_VALUE_TYPE_UNSIGNED_INT = 1

UUID = "GPU-fa4e0000-0000-0000-0000-000000000000"
_HANDLE = ("fake-gpu", 0)


class NVMLError(Exception):
    def __init__(self, value: int = NVML_ERROR_NOT_SUPPORTED):
        self.value = value
        super().__init__(f"NVML error {value}")


def nvmlInit() -> None:
    pass


def nvmlShutdown() -> None:
    pass


def nvmlDeviceGetCount() -> int:
    return 1


def nvmlDeviceGetHandleByIndex(i: int):
    if i != 0:
        raise NVMLError(2)
    return _HANDLE


def nvmlDeviceGetHandleByUUID(uuid):
    uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
    if uuid != UUID:
        raise NVMLError(2)
    return _HANDLE


def nvmlDeviceGetUUID(h) -> str:
    return UUID


def nvmlDeviceGetPciInfo(h):
    return SimpleNamespace(busId=b"00000000:00:06.0")


def nvmlDeviceGetName(h) -> str:
    return "Fake H200"


def nvmlDeviceGetMigMode(h):
    return [0, 0]


def nvmlDeviceGetTotalEnergyConsumption(h) -> int:
    ticks = int(time.monotonic() / 0.1)
    return ticks * 12_000  # mJ: 12 J per 100 ms = 120 W


def nvmlDeviceGetFieldValues(h, ids):
    out = []
    for f in ids:
        value = SimpleNamespace(uiVal=120_000, dVal=120_000.0, ulVal=120_000, ullVal=120_000, sllVal=120_000)
        out.append(SimpleNamespace(fieldId=f, nvmlReturn=0, valueType=NVML_VALUE_TYPE_UNSIGNED_INT, value=value))
    return out


def nvmlDeviceGetPowerUsage(h) -> int:
    return 120_000


def nvmlDeviceGetTemperature(h, sensor) -> int:
    return 38


def nvmlDeviceGetClockInfo(h, clock) -> int:
    return 1980


def nvmlDeviceGetCurrentClocksEventReasons(h) -> int:
    return 0


def nvmlDeviceGetComputeRunningProcesses(h):
    pids = [os.getppid()]
    foreign = os.environ.get("GCBENCH_FAKE_NVML_FOREIGN_PID")
    if foreign:
        pids.append(int(foreign))
    return [SimpleNamespace(pid=p, usedGpuMemory=1 << 30) for p in pids]


def nvmlDeviceGetGraphicsRunningProcesses(h):
    return []


def nvmlSystemGetDriverVersion() -> str:
    return "580.0-fake"


def nvmlSystemGetNVMLVersion() -> str:
    return "13.580-fake"


def nvmlDeviceGetPowerManagementLimit(h) -> int:
    return 700_000


def nvmlDeviceGetEnforcedPowerLimit(h) -> int:
    return 700_000


def nvmlDeviceGetPowerManagementDefaultLimit(h) -> int:
    return 700_000


def nvmlDeviceGetPowerManagementLimitConstraints(h):
    return [200_000, 700_000]
