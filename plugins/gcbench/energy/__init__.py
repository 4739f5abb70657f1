"""Energy measurement: NVML counter with edge correction, nvidia-smi fallback, RAPL,
a simulated device for machines without a GPU, and ``gcbench doctor``.

Entry point: :class:`gcbench.energy.meter.Meter`. Importing this package is cheap
(no torch, pandas or pynvml); names below are loaded on first use.
"""

from __future__ import annotations

from gcbench import spec as _spec
from gcbench.energy import backend as _backend
from gcbench.energy.base import SAMPLE_COLUMNS, DeviceEnergy, EnergyResult

_spec.register_energy_backends(_backend.gpu_backend_names())

__all__ = ["SAMPLE_COLUMNS", "DeviceEnergy", "EnergyResult", "Meter"]


def __getattr__(name: str):
    if name == "Meter":
        from gcbench.energy.meter import Meter

        return Meter
    raise AttributeError(name)
