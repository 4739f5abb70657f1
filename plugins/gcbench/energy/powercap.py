"""Per-GPU power cap for the duration of a trial, always restored afterwards.

The multi-GPU study runs each configuration at a power limit of 300, 250 or 200 W per
GPU. :class:`PowerCap` sets that limit through NVML before the measured window and puts
back the limit each GPU had before, whatever happens in between (the workload raising,
a KeyboardInterrupt, a failure while setting the second GPU)::

    with PowerCap(cap_w=250, gpu_indices=[0, 1]) as cap:
        cap.applied   # [AppliedCap(index=0, previous_w=700.0, cap_w=250.0, enforced_w=250.0), ...]
        ...           # warm-up and measured window
    # both GPUs are back at 700 W here

How: ``nvmlDeviceGetPowerManagementLimit`` (mW) is read and kept,
``nvmlDeviceGetPowerManagementLimitConstraints`` gives the allowed [min, max] (mW; on
the H200 200-700 W), ``nvmlDeviceSetPowerManagementLimit`` sets the cap (mW), and
``nvmlDeviceGetEnforcedPowerLimit`` tells what the driver actually enforces (it may be
lower when another limit, e.g. a thermal or board one, is tighter).

Permissions: setting a power limit needs root or ``CAP_SYS_ADMIN``. NVML answers
``NVML_ERROR_NO_PERMISSION`` otherwise and :class:`PowerCapPermissionError` is raised so
the trial is *skipped* with that reason instead of silently running uncapped. In Docker
run the trial container with ``--cap-add SYS_ADMIN`` (DockerOperator:
``cap_add=["SYS_ADMIN"]``); the limit applies to the whole GPU, not only the container.

Indices: ``gpu_indices`` are NVML indices. NVML enumerates GPUs in PCI bus order; CUDA does
the same only with ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` (the trial process sets it). Inside a
container that sees only its own GPUs, NVML index 0 is the container's first GPU.

A process killed with SIGKILL cannot restore anything: :func:`reset_to_default` puts a
GPU back at its default limit and is what an operator (or the next trial) runs then.

For every trial, whatever its kind: :class:`TrialPowerCap` (used by
:func:`gcbench.trial.run_trial` around the workload) is the one place a trial touches a
GPU's limit. Before the workload it reads each of the trial's GPUs (current, default,
min, max limit: ``device_state_before`` in result.json); a GPU whose limit is not its
default was left capped by an earlier trial that could not restore it (SIGKILL, OOM,
a lost node) and is reset to the default first, or, without the permission to do so,
the trial is skipped with that reason: an uncapped baseline never runs capped, and a
capped trial restores the default, not a leftover. While a cap is applied the trial
keeps ``power_cap.json`` in its folder (``state: applying`` with each GPU's limit to put
back, written before the first GPU is set, then ``applied``); it says ``restored`` once
the limit is back, so a runner that outlives a killed
trial can restore it (:func:`restore_leftover`).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gcbench.errors import GCBenchError, SkipTrial
from gcbench.units import mw_to_w

log = logging.getLogger(__name__)

CAP_SYS_ADMIN_HINT = (
    "setting a GPU power limit needs root or CAP_SYS_ADMIN "
    "(docker run --cap-add SYS_ADMIN; DockerOperator cap_add=['SYS_ADMIN'])"
)


class PowerCapError(GCBenchError):
    """A power cap cannot be applied; the trial is skipped with :attr:`skip_reason`.

    Attributes:
        device: the GPU concerned (``gpu0`` ...).
        skip_reason: one line for the trial's stored reasons.
    """

    def __init__(self, device: str, message: str):
        self.device = device
        self.skip_reason = f"{device}: {message}"
        super().__init__(self.skip_reason)


class PowerCapPermissionError(PowerCapError, SkipTrial):
    """NVML refused to set the limit (NVML_ERROR_NO_PERMISSION): needs CAP_SYS_ADMIN.

    A :class:`gcbench.errors.SkipTrial`: the trial exits "skipped" with this reason.
    """


class PowerCapRangeError(PowerCapError, SkipTrial):
    """The requested cap lies outside the GPU's [min, max] power limit (trial skipped)."""


class PowerCapUnavailableError(PowerCapError, SkipTrial):
    """A cap was requested where there is no GPU or no NVML to set it (trial skipped)."""


class PowerCapRestoreError(GCBenchError):
    """A previous limit could not be put back; the GPU is left capped (operator action).

    Attributes:
        devices: the GPUs left at the cap.
    """

    def __init__(self, devices: list[str], message: str):
        self.devices = devices
        super().__init__(f"{', '.join(devices)}: {message}")


@dataclass(frozen=True)
class AppliedCap:
    """One GPU's cap while it is applied.

    Attributes:
        index: NVML index.
        previous_w: the limit before the trial, W (restored at exit).
        cap_w: the limit set, W.
        enforced_w: the limit the driver enforces after setting, W; None when unreadable.
        min_w, max_w: the GPU's allowed limit range, W.
    """

    index: int
    previous_w: float
    cap_w: float
    enforced_w: float | None
    min_w: float
    max_w: float


def _is_no_permission(pynvml: Any, exc: Exception) -> bool:
    return getattr(exc, "value", None) == pynvml.NVML_ERROR_NO_PERMISSION


class PowerCap:
    """Context manager: cap each GPU of ``gpu_indices`` at ``cap_w`` watts, then restore.

    Args:
        cap_w: the per-GPU limit in W, or None for "no cap" (a no-op that touches
            neither NVML nor the GPUs).
        gpu_indices: NVML indices of the trial's GPUs.

    Raises (from ``__enter__``, after undoing any GPU already capped):
        PowerCapPermissionError: no permission to set limits (see module docstring).
        PowerCapRangeError: ``cap_w`` outside the GPU's [min, max].
        PowerCapUnavailableError: no GPU in ``gpu_indices`` or NVML does not start.
        PowerCapError: any other NVML failure while applying (the trial fails).

    The first three are :class:`gcbench.errors.SkipTrial`: the trial is skipped with
    the reason (``exc.skip_reason``).

    ``__exit__`` restores every applied GPU even when the body raised. A failed restore
    is logged; it raises :class:`PowerCapRestoreError` only when the body itself did not
    raise (the body's exception is never masked).
    """

    def __init__(self, cap_w: float | None, gpu_indices: list[int]):
        if cap_w is not None and cap_w <= 0:
            raise ValueError(f"power cap must be > 0 W, got {cap_w}")
        self.cap_w = cap_w
        self.gpu_indices = list(gpu_indices)
        self.applied: list[AppliedCap] = []
        self._handles: dict[int, Any] = {}
        self._pynvml: Any = None  # the pynvml module once entered with a cap
        self.restore_failed: list[str] = []  # GPUs left capped by the last restore

    # -- entering -------------------------------------------------------------------

    def __enter__(self) -> PowerCap:
        if self.cap_w is None:
            return self
        import pynvml  # nvidia-ml-py; imported here so that importing gcbench stays cheap

        self._pynvml = pynvml
        if not self.gpu_indices:
            raise PowerCapUnavailableError("gpu", f"a {self.cap_w:g} W power cap needs a GPU; the trial has none")
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise PowerCapUnavailableError("nvml", f"cannot initialise NVML to set a power cap: {exc}") from exc
        try:
            for index in self.gpu_indices:
                self._apply(index)
        except BaseException:
            self._restore_all(raise_errors=False)
            self._shutdown()
            raise
        return self

    def _apply(self, index: int) -> None:
        pynvml = self._pynvml
        device = f"gpu{index}"
        cap_w = self.cap_w
        assert cap_w is not None  # __enter__ applies nothing without a cap
        cap_mw = int(round(cap_w * 1000))
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            previous_mw = pynvml.nvmlDeviceGetPowerManagementLimit(handle)
            min_mw, max_mw = pynvml.nvmlDeviceGetPowerManagementLimitConstraints(handle)
        except pynvml.NVMLError as exc:
            raise PowerCapError(device, f"cannot read the power limit: {exc}") from exc
        if not min_mw <= cap_mw <= max_mw:
            raise PowerCapRangeError(
                device,
                f"power cap {self.cap_w:g} W outside the allowed range {mw_to_w(min_mw):g}-{mw_to_w(max_mw):g} W",
            )
        try:
            pynvml.nvmlDeviceSetPowerManagementLimit(handle, cap_mw)
        except pynvml.NVMLError as exc:
            if _is_no_permission(pynvml, exc):
                raise PowerCapPermissionError(
                    device, f"no permission to set a {self.cap_w:g} W power cap: {CAP_SYS_ADMIN_HINT}"
                ) from exc
            raise PowerCapError(device, f"cannot set a {self.cap_w:g} W power cap: {exc}") from exc
        # Recorded only once set, so that only GPUs we changed are restored.
        self._handles[index] = handle
        try:
            enforced_w: float | None = mw_to_w(pynvml.nvmlDeviceGetEnforcedPowerLimit(handle))
        except pynvml.NVMLError:
            enforced_w = None
        self.applied.append(
            AppliedCap(
                index=index,
                previous_w=mw_to_w(previous_mw),
                cap_w=float(cap_w),
                enforced_w=enforced_w,
                min_w=mw_to_w(min_mw),
                max_w=mw_to_w(max_mw),
            )
        )
        log.info("gpu%d power limit %.0f W -> %.0f W", index, mw_to_w(previous_mw), self.cap_w)

    # -- leaving --------------------------------------------------------------------

    def __exit__(self, exc_type, exc, tb) -> None:
        if self.cap_w is None:
            return
        try:
            self._restore_all(raise_errors=exc_type is None)
        finally:
            self._shutdown()

    def _restore_all(self, raise_errors: bool) -> None:
        pynvml = self._pynvml
        failed: list[str] = []
        messages: list[str] = []
        for applied in reversed(self.applied):
            handle = self._handles[applied.index]
            try:
                pynvml.nvmlDeviceSetPowerManagementLimit(handle, int(round(applied.previous_w * 1000)))
                log.info("gpu%d power limit restored to %.0f W", applied.index, applied.previous_w)
            except pynvml.NVMLError as exc:
                failed.append(f"gpu{applied.index}")
                messages.append(f"gpu{applied.index}: {exc}")
                log.error(
                    "gpu%d: could not restore the power limit to %.0f W: %s "
                    "(run gcbench.energy.powercap.reset_to_default)",
                    applied.index,
                    applied.previous_w,
                    exc,
                )
        self.applied = []
        self._handles = {}
        self.restore_failed = failed
        if failed and raise_errors:
            raise PowerCapRestoreError(failed, "previous power limit not restored: " + "; ".join(messages))

    def _shutdown(self) -> None:
        if self._pynvml is not None:
            try:
                self._pynvml.nvmlShutdown()
            except self._pynvml.NVMLError:
                pass

    def metrics(self) -> dict[str, float | str | None]:
        """Metrics for result.json while applied: ``power_cap_w``, enforced and previous limits (W)."""
        if self.cap_w is None:
            return {"power_cap_w": None, "power_cap_state": "none"}
        enforced = [a.enforced_w for a in self.applied if a.enforced_w is not None]
        return {
            "power_cap_w": float(self.cap_w),
            "power_cap_state": "applied",
            "power_limit_enforced_w": min(enforced) if enforced and len(enforced) == len(self.applied) else None,
            "power_limit_previous_w": max((a.previous_w for a in self.applied), default=None),
        }


def limits_w(gpu_indices: list[int]) -> dict[int, dict[str, float]]:
    """Current, default, min and max power limit (W) of each GPU; for plan validation.

    Raises:
        PowerCapError: NVML unavailable or a limit unreadable.
    """
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise PowerCapError("nvml", f"cannot initialise NVML: {exc}") from exc
    try:
        out = {}
        for index in gpu_indices:
            try:
                h = pynvml.nvmlDeviceGetHandleByIndex(index)
                lo, hi = pynvml.nvmlDeviceGetPowerManagementLimitConstraints(h)
                out[index] = {
                    "current_w": mw_to_w(pynvml.nvmlDeviceGetPowerManagementLimit(h)),
                    "default_w": mw_to_w(pynvml.nvmlDeviceGetPowerManagementDefaultLimit(h)),
                    "min_w": mw_to_w(lo),
                    "max_w": mw_to_w(hi),
                }
            except pynvml.NVMLError as exc:
                raise PowerCapError(f"gpu{index}", f"cannot read power limits: {exc}") from exc
        return out
    finally:
        pynvml.nvmlShutdown()


def reset_to_default(gpu_indices: list[int]) -> dict[int, float]:
    """Put each GPU back at its default power limit (W returned per index).

    For recovery after a trial process was killed while a cap was applied.

    Raises:
        PowerCapPermissionError: no permission (needs CAP_SYS_ADMIN).
        PowerCapError: other NVML failures.
    """
    import pynvml

    pynvml.nvmlInit()
    try:
        out = {}
        for index in gpu_indices:
            h = pynvml.nvmlDeviceGetHandleByIndex(index)
            default_mw = pynvml.nvmlDeviceGetPowerManagementDefaultLimit(h)
            try:
                pynvml.nvmlDeviceSetPowerManagementLimit(h, default_mw)
            except pynvml.NVMLError as exc:
                if _is_no_permission(pynvml, exc):
                    raise PowerCapPermissionError(f"gpu{index}", CAP_SYS_ADMIN_HINT) from exc
                raise PowerCapError(f"gpu{index}", f"cannot reset the power limit: {exc}") from exc
            out[index] = mw_to_w(default_mw)
        return out
    finally:
        pynvml.nvmlShutdown()


def nvml_indices_for_uuids(uuids: list[str]) -> list[int]:
    """NVML indices of the GPUs with these UUIDs (``GPU-`` prefix optional).

    CUDA and NVML may number GPUs differently (CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER,
    containers); the UUID is the same in both, so the workload maps its CUDA devices
    (``torch.cuda.get_device_properties(i).uuid``) to NVML indices through it.

    Raises:
        PowerCapUnavailableError: NVML does not start or a UUID is not found.
    """
    import pynvml

    wanted = [u.lower().removeprefix("gpu-") for u in uuids]
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise PowerCapUnavailableError("nvml", f"cannot initialise NVML: {exc}") from exc
    try:
        by_uuid = {}
        for index in range(pynvml.nvmlDeviceGetCount()):
            uuid = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(index))
            uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
            by_uuid[uuid.lower().removeprefix("gpu-")] = index
    finally:
        pynvml.nvmlShutdown()
    missing = [u for u in wanted if u not in by_uuid]
    if missing:
        raise PowerCapUnavailableError("nvml", f"GPU UUID(s) not seen by NVML: {', '.join(missing)}")
    return [by_uuid[u] for u in wanted]


POWER_CAP_FILE = "power_cap.json"
"""The trial folder's record of a cap in effect (``state``: ``applying`` | ``applied`` |
``restored``)."""


class LeftoverCapError(PowerCapError, SkipTrial):
    """A GPU is not at its default limit before the trial and cannot be reset (skipped)."""


@dataclass(frozen=True)
class DeviceLimitState:
    """One GPU's power limit as found before a trial (W).

    Attributes:
        index: NVML index.
        limit_w: the limit in force; default_w: the GPU's default limit.
        min_w, max_w: the allowed range.
        action: ``none`` (at its default), ``reset`` (a leftover limit was put back to
            the default before the trial) or ``unreadable``.
        reason: why the state is unreadable, or what was reset.
    """

    index: int
    limit_w: float | None
    default_w: float | None
    min_w: float | None = None
    max_w: float | None = None
    action: str = "none"
    reason: str | None = None


def _write_record(path: Path, record: dict[str, Any]) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record), encoding="utf-8")
    os.replace(tmp, path)


class TrialPowerCap:
    """The trial's GPU power limits: checked, reset if left over, capped, restored.

    Args:
        cap_w: ``power_cap_w`` of the trial's settings (W per GPU) or None (no cap:
            the GPUs must be at their default limit).
        gpu_indices: NVML indices of the trial's GPUs (the spec's host indices: both
            runners let NVML see every GPU, numbered in PCI bus order as CUDA is with
            ``CUDA_DEVICE_ORDER=PCI_BUS_ID``).
        outdir: the trial folder (``power_cap.json`` is kept there while capped).
        log: the trial log.

    ``__enter__`` raises what :class:`PowerCap` raises (skips carry
    ``not_in_effect={"power_cap_w": ...}``) and :class:`LeftoverCapError` (a skip) when a
    leftover limit cannot be reset. Where there is no NVML (no driver, no GPU, the
    simulated device) an uncapped trial goes on, its state recorded as unreadable.
    """

    def __init__(self, cap_w: float | None, gpu_indices: list[int], outdir: Path, log: Any = print):
        self.cap_w = float(cap_w) if cap_w is not None else None
        self.gpu_indices = list(gpu_indices)
        self.outdir = Path(outdir)
        self.log = log
        self.state_before: list[DeviceLimitState] = []
        self.state_note: str | None = None
        self._checked = False
        self._cap: PowerCap | None = None
        self._metrics: dict[str, Any] | None = None

    def check(self) -> list[DeviceLimitState]:
        """Read (and reset, where left over) every GPU's limit; see the class docstring.

        Raises:
            LeftoverCapError: a GPU is below its default and cannot be reset.
        """
        if self._checked:
            return self.state_before
        self._checked = True
        try:
            return self._check()
        except SkipTrial as exc:
            self._not_in_effect(exc)
            raise

    def _not_in_effect(self, exc: SkipTrial) -> None:
        if self.cap_w is not None:  # the report says which setting could not be put in effect
            exc.not_in_effect.setdefault("power_cap_w", f"{self.cap_w:g} W cap not applied: {exc}")

    def _check(self) -> list[DeviceLimitState]:
        if not self.gpu_indices:
            self.state_note = "no GPU"
            return []
        try:
            import pynvml
        except ImportError:
            self.state_note = "pynvml not installed"
            return []
        try:
            pynvml.nvmlInit()
        except Exception as exc:  # noqa: BLE001 - pynvml raises its own and library-load errors
            self.state_note = f"NVML unavailable: {exc}"
            return []
        try:
            for index in self.gpu_indices:
                self.state_before.append(self._check_one(pynvml, index))
        finally:
            try:
                pynvml.nvmlShutdown()
            except Exception:  # noqa: BLE001 - shutting down is best effort
                pass
        return self.state_before

    def _check_one(self, pynvml: Any, index: int) -> DeviceLimitState:
        device = f"gpu{index}"
        try:
            h = pynvml.nvmlDeviceGetHandleByIndex(index)
            limit_mw = pynvml.nvmlDeviceGetPowerManagementLimit(h)
            default_mw = pynvml.nvmlDeviceGetPowerManagementDefaultLimit(h)
        except pynvml.NVMLError as exc:
            if self.cap_w is not None:
                raise PowerCapError(device, f"cannot read the power limit: {exc}") from exc
            return DeviceLimitState(index, None, None, action="unreadable", reason=str(exc))
        min_w: float | None = None
        max_w: float | None = None
        try:
            lo, hi = pynvml.nvmlDeviceGetPowerManagementLimitConstraints(h)
            min_w, max_w = mw_to_w(lo), mw_to_w(hi)
        except pynvml.NVMLError:
            pass
        limit_w, default_w = mw_to_w(limit_mw), mw_to_w(default_mw)
        if limit_mw == default_mw:
            return DeviceLimitState(index, limit_w, default_w, min_w, max_w)
        what = f"power limit {limit_w:g} W, not its default {default_w:g} W (left by an earlier trial or by hand)"
        try:
            pynvml.nvmlDeviceSetPowerManagementLimit(h, default_mw)
        except pynvml.NVMLError as exc:
            hint = CAP_SYS_ADMIN_HINT if _is_no_permission(pynvml, exc) else str(exc)
            raise LeftoverCapError(
                device, f"{what}; cannot reset it to the default ({hint}): measuring now would not be uncapped"
            ) from exc
        self.log(f"{device}: {what}: reset to {default_w:g} W before the trial")
        return DeviceLimitState(index, limit_w, default_w, min_w, max_w, action="reset", reason=what)

    def __enter__(self) -> TrialPowerCap:
        try:
            self.check()
            if self.cap_w is not None:
                self._cap = PowerCap(self.cap_w, self.gpu_indices)
                # before any GPU is set: a process killed between setting a GPU and the
                # "applied" record still leaves what to put back (restore_leftover)
                self._write("applying")
                try:
                    self._cap.__enter__()
                except BaseException:
                    if not self._cap.restore_failed:  # PowerCap undid what it had set
                        self._write("restored")
                    self._cap = None
                    raise
                self._write("applied")
        except SkipTrial as exc:
            self._not_in_effect(exc)
            raise
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._cap is None:
            return
        cap = self._cap
        self._metrics = cap.metrics()
        try:
            cap.__exit__(exc_type, exc, tb)  # restores every GPU; raises only when the body did not
        finally:
            if not cap.restore_failed:
                self._write("restored")
            self._cap = None

    def _write(self, state: str) -> None:
        cap = self._cap
        applied = [asdict(a) for a in cap.applied] if cap is not None else []
        if state == "applying":  # check() left every GPU at its default: that is what goes back
            applied = [{"index": s.index, "previous_w": s.default_w} for s in self.state_before]
        if state == "restored":  # PowerCap forgets what it applied once restored
            previous = _read_record(self.outdir / POWER_CAP_FILE) or {}
            applied = previous.get("gpus") or []
        _write_record(self.outdir / POWER_CAP_FILE, {"state": state, "cap_w": self.cap_w, "gpus": applied})

    def metrics(self) -> dict[str, Any]:
        """``power_cap_w`` and, while or after capped, the enforced and previous limits (W)."""
        if self._cap is not None:
            return self._cap.metrics()
        return self._metrics or {"power_cap_w": self.cap_w, "power_cap_state": "none"}

    def device_state(self) -> dict[str, Any]:
        """``device_state_before`` for result.json: each GPU's limits as found, or why unread."""
        return {
            "power_limits": [asdict(s) for s in self.state_before],
            "note": self.state_note,
            "reset": [f"gpu{s.index}" for s in self.state_before if s.action == "reset"],
        }


def _read_record(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def restore_leftover(outdir: Path) -> str | None:
    """After the trial process is gone: put back the limits its ``power_cap.json`` says
    are still capped (the trial was killed before it could). Returns what was done, in
    one line, or None when nothing was left capped. Never raises: a runner without the
    permission leaves it to the next trial's check (:class:`TrialPowerCap`)."""
    path = Path(outdir) / POWER_CAP_FILE
    record = _read_record(path)
    if not record or record.get("state") not in ("applying", "applied"):
        return None
    gpus = [g for g in record.get("gpus") or [] if isinstance(g, dict)]
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - no NVML here: the next trial resets it
        return f"power cap left applied ({exc}); the next trial on these GPUs resets it"
    done, failed = [], []
    try:
        for g in gpus:
            try:
                h = pynvml.nvmlDeviceGetHandleByIndex(int(g["index"]))
                pynvml.nvmlDeviceSetPowerManagementLimit(h, int(round(float(g["previous_w"]) * 1000)))
                done.append(f"gpu{g['index']} {float(g['previous_w']):g} W")
            except (pynvml.NVMLError, KeyError, TypeError, ValueError) as exc:
                failed.append(f"gpu{g.get('index')}: {exc}")
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 - best effort
            pass
    if not failed:
        _write_record(path, {**record, "state": "restored", "restored_by": "runner"})
    parts = []
    if done:
        parts.append("power limit restored by the runner: " + ", ".join(done))
    if failed:
        parts.append("could not restore (the next trial resets it): " + "; ".join(failed))
    return "; ".join(parts)
