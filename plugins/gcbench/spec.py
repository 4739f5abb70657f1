"""The trial spec: the plain-JSON description of one measured run.

A plan expands into a list of :class:`TrialSpec`. The spec is everything the trial
process needs (``python -m gcbench.trial SPEC.json OUTDIR``) and nothing about where
or when it runs, so that its id is stable:

    trial_id = sha256(plan name + "\\n" + canonical JSON of the spec)[:16]

The canonical JSON has sorted keys, no whitespace and excludes ``trial_id``,
``order`` (the position in a randomized schedule) and ``devices`` (the placement: which
GPUs of which host run it; the number of GPUs is the ``gpus`` setting, which is
hashed). The same plan therefore gives the same ids in any process on any machine,
a trial keeps its id on whichever GPU or host (``hosts:``) it is placed, and adding a
variant to a plan adds ids without changing the existing ones.
"""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

Scalar = str | int | float | bool | None

TRIAL_SETTINGS: dict[str, Any] = {"power_cap_w": None, "cpus": "auto"}
"""Settings the trial process applies around the workload, for every kind
(:mod:`gcbench.trial`), with their defaults: ``power_cap_w`` is the per-GPU power limit
in W (None: the GPU's default limit; :mod:`gcbench.energy.powercap`); ``cpus`` the
trial's CPU set, ``auto`` (its GPUs' share of the host), a count, or ``all``
(:mod:`gcbench.energy.cpuset`). They live in a workload's ``settings`` like the kind's
own, so specs and trial ids are unchanged (a default is not written into the spec)."""

MAX_CPUS = 4096
"""Largest ``cpus`` count a plan may ask for."""


def trial_setting_problem(key: str, value: Any) -> str | None:
    """Why ``value`` is not a valid trial-level setting ``key`` (:data:`TRIAL_SETTINGS`), or None."""
    if key == "power_cap_w" and value is not None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            return f"power_cap_w must be a positive number of watts per GPU or null, got {value!r}"
    if key == "cpus" and value not in ("auto", "all"):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_CPUS:
            return f"cpus must be auto, all or a whole number of CPUs from 1 to {MAX_CPUS}, got {value!r}"
    return None


_ENERGY_BACKENDS: list[str] = []
"""Names a plan may give as ``energy.backend`` besides ``auto``: filled by
:mod:`gcbench.energy` from its registry (``gcbench.energy.backend.REGISTRY``, the one
list) when that package is imported; this layer sits below it, so the names are pushed
down rather than imported up. ``gcbench.plan`` imports ``gcbench.energy``, so every plan
is checked against them; the Meter refuses an unknown name in any case."""


def register_energy_backends(names: tuple[str, ...]) -> None:
    """Called by :mod:`gcbench.energy` with the registered GPU backends' names."""
    _ENERGY_BACKENDS[:] = list(names)


def _known_backend(name: str) -> str:
    if _ENERGY_BACKENDS and name != "auto" and name not in _ENERGY_BACKENDS:
        raise ValueError(f"unknown energy backend {name!r}: expected one of auto, {', '.join(_ENERGY_BACKENDS)}")
    return name


BackendName = Annotated[str, AfterValidator(_known_backend)]


class StableWarmup(BaseModel):
    """Warm up until the step time settles (``warmup: {until_stable: {...}}``).

    Steps run (each one synchronised with the device) until the coefficient of
    variation of the last ``steps`` step times is at most ``cv_max``, or for at most
    ``max_seconds`` (the cap; reaching it is recorded in result.json as ``capped``).

    Attributes:
        cv_max: largest standard deviation / mean of the recent step times.
        steps: how many recent step times are judged (at least 3).
        max_seconds: cap of the warm-up, s.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    cv_max: float = Field(default=0.1, gt=0, le=1)
    steps: int = Field(default=5, ge=3, le=1000)
    max_seconds: float = Field(default=60.0, gt=0, le=3600)


class Amount(BaseModel):
    """A warm-up or measurement window, in steps or in seconds (exactly one is set); a
    warm-up may instead run ``until_stable`` (:class:`StableWarmup`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    steps: int | None = Field(default=None, ge=0)
    seconds: float | None = Field(default=None, ge=0)
    until_stable: StableWarmup | None = None


_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"


def _no_password(data: Any) -> Any:
    """A password never goes in a plan (plans are committed, hashed and shown): it is read
    from the environment variable named by ``password_env``."""
    if isinstance(data, dict) and "password" in data:
        raise ValueError(
            "a password never goes in a plan: set password_env to the name of an environment variable holding it"
        )
    return data


class IpmiNodeSettings(BaseModel):
    """The BMC read over IPMI with ``ipmitool`` (``energy.node.ipmi``).

    Attributes:
        host, port: the BMC's address and UDP port (623 is IPMI's); not for ``open``.
        user: the IPMI user (not for ``open``).
        password_env: name of the environment variable that holds the password (passed to
            ``ipmitool -E`` as ``IPMI_PASSWORD``, never on a command line; not for ``open``).
        interface: ``lanplus`` (IPMI 2.0 RMCP+), ``lan`` (IPMI 1.5), or ``open``: the
            local BMC in band through the kernel's ``/dev/ipmi0`` (root; no network, no
            password).
        cipher_suite: RMCP+ cipher suite (``ipmitool -C``; 3 is the common one, 17 on newer
            BMCs; None lets ipmitool probe, which costs seconds per read on some BMCs).
        reading: ``dcmi`` (``ipmitool dcmi power reading``), ``sensor`` (an SDR sensor in
            watts, ``ipmitool sensor reading``), or ``auto`` (DCMI, else the one watts sensor).
        sensor: the SDR sensor's name (``reading: sensor``; ``auto`` needs it when the BMC
            has more than one watts sensor).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str | None = Field(default=None, min_length=1)
    port: int = Field(default=623, ge=1, le=65535)
    user: str | None = Field(default=None, min_length=1)
    password_env: str = Field(default="IPMI_PASSWORD", pattern=_ENV_NAME)
    interface: Literal["lanplus", "lan", "open"] = "lanplus"
    cipher_suite: int | None = Field(default=3, ge=0, le=17)
    reading: Literal["auto", "dcmi", "sensor"] = "auto"
    sensor: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _reject_password(cls, data: Any) -> Any:
        return _no_password(data)

    @model_validator(mode="after")
    def _address_over_lan(self) -> IpmiNodeSettings:
        if self.interface == "open" and (self.host or self.user):
            raise ValueError("interface open reads the local BMC through /dev/ipmi0: no host or user")
        if self.interface != "open" and not (self.host and self.user):
            raise ValueError(
                f"interface {self.interface} needs host and user (interface: open reads the local BMC in band)"
            )
        return self


class RedfishNodeSettings(BaseModel):
    """The BMC read over Redfish (``energy.node.redfish``): ``Chassis/<id>/Power``
    (``PowerControl[].PowerConsumedWatts``) or, in the newer model, the chassis'
    ``EnvironmentMetrics`` (``PowerWatts.Reading``) beside its ``PowerSubsystem``.

    Attributes:
        url: the service root's scheme, host and port (``https://bmc.example:443``).
        chassis: the chassis id (None: the first chassis that reports power).
        user, password_env: HTTP basic authentication; the password is read from the
            environment variable named ``password_env``.
        verify_tls: check the BMC's TLS certificate.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = Field(pattern=r"^https?://[^/\s]+/?$")
    chassis: str | None = None
    user: str | None = None
    password_env: str | None = Field(default=None, pattern=_ENV_NAME)
    verify_tls: bool = True

    @model_validator(mode="before")
    @classmethod
    def _reject_password(cls, data: Any) -> Any:
        return _no_password(data)


class NodeSettings(BaseModel):
    """The optional node meter: whole-node power from the BMC (``energy.node``), read at its
    own slow period beside the GPU and CPU backends (:mod:`gcbench.energy.node`).

    Attributes:
        ipmi, redfish: exactly one of them.
        period_s: how often the BMC is read, s (BMCs update about every second or slower).
        timeout_s: how long one read may take, s.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    ipmi: IpmiNodeSettings | None = None
    redfish: RedfishNodeSettings | None = None
    period_s: float = Field(default=1.0, ge=0.2, le=60)
    timeout_s: float = Field(default=5.0, gt=0, le=60)

    @model_validator(mode="after")
    def _one_protocol(self) -> NodeSettings:
        if (self.ipmi is None) == (self.redfish is None):
            raise ValueError("give exactly one of ipmi or redfish")
        return self


class EnergySettings(BaseModel):
    """How a trial measures energy.

    Attributes:
        backend: ``auto`` (the registered GPU backends in their order: NVML, nvidia-smi,
            ..., simulated last), or one of them forced by name (see
            docs/energy-backends.md). ``simulated`` yields numbers labelled
            ``source = simulated``.
        sample_hz: power sampling rate (Hz) of the background sampler.
        counter_hz: energy-counter read rate (Hz); NVML's counter updates every
            ~100 ms and one read costs ~4 ms (ARCHITECTURE.md), so 10-20 Hz is enough.
        jitter_max_s: the measured window starts after a seeded random delay in
            [0, jitter_max_s], so windows do not line up with the sensor's averaging.
        idle_baseline_s: idle power measured before the trial for this long (0: off).
        cooldown_max_s: wait at most this long before the trial for the GPU
            temperature to fall below ``cooldown_temp_c`` (0: off).
        cooldown_temp_c: temperature threshold of the cool-down (deg C).
        rapl_root: powercap tree for CPU energy (tests point it at a fake tree).
        codecarbon: also run a CodeCarbon tracker over the main window, where the
            optional ``codecarbon`` package is installed, and store its estimate
            beside the direct measurement (``codecarbon_energy_j``, ``codecarbon_rel_error``).
        node: the optional node meter (:class:`NodeSettings`; None: no node figure).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: BackendName = "auto"
    sample_hz: float = Field(default=20.0, gt=0, le=1000)
    counter_hz: float = Field(default=10.0, gt=0, le=100)
    jitter_max_s: float = Field(default=0.0, ge=0, le=10)
    idle_baseline_s: float = Field(default=0.0, ge=0, le=600)
    cooldown_max_s: float = Field(default=0.0, ge=0, le=3600)
    cooldown_temp_c: float = Field(default=50.0, gt=0, le=120)
    rapl_root: str = "/sys/class/powercap"
    codecarbon: bool = False
    node: NodeSettings | None = None


class TrialSpec(BaseModel):
    """One trial: a workload with its settings and factor values, one repetition.

    Attributes:
        plan: plan name.
        workload: name of the plan's workload entry this trial comes from.
        kind: workload kind, a name in the registry (:mod:`gcbench.kinds`).
        variant: readable label of the factor combination, e.g.
            ``tinylm-infer[batch_size=8,path=torch]``; repetitions of one variant form
            a group in statistics.
        factors: the factor values of this variant (from the plan's matrix).
        settings: effective workload settings (fixed settings overlaid by factors).
        repetition: 0-based repetition index.
        seed: per-trial seed, derived from the plan seed, variant and repetition.
        devices: host GPU indices (as in CUDA_VISIBLE_DEVICES) the trial uses; the
            placement, not hashed into the id.
        warmup, window: warm-up and measured window.
        energy: measurement settings.
        order: position in the plan's (possibly randomized) schedule; not hashed.
        program: for the kinds that run a user's own work (``python``, ``command``,
            ``container``): ``{"entrypoint": "pkg.mod:function"}``, ``{"command":
            [argv...], "env": {...}, "cwd": "..."}``, ``{"image": "...", "command":
            [...]}``, each with an optional ``"unit"`` (the unit of work the counts are
            in); None for the built-in kinds (and then left out of the hashed JSON, so
            their ids are those of specs written before it existed).
        preprocessor: for a trial fed by a declared preprocessor (TinyLM ``path:
            external-<name>``): ``{"name", "source_sha256", "run", "output"}``
            (:meth:`gcbench.tokenizer.preprocessors.Preprocessor.spec_entry`). Its source
            hash is hashed into the id: a changed source is a new trial, never pooled
            with the old version's. None otherwise (left out of the hashed JSON).
        trial_id: the stable id (see module docstring); filled by :meth:`with_id`.
    """

    model_config = ConfigDict(extra="forbid")

    plan: str
    workload: str
    kind: str
    variant: str
    factors: dict[str, Scalar] = Field(default_factory=dict)
    settings: dict[str, Any] = Field(default_factory=dict)
    repetition: int = Field(ge=0)
    seed: int
    devices: list[int] = Field(default_factory=list)
    warmup: Amount = Amount(steps=0)
    window: Amount = Amount(steps=1)
    energy: EnergySettings = EnergySettings()
    order: int = 0
    program: dict[str, Any] | None = None
    preprocessor: dict[str, Any] | None = None
    trial_id: str = ""

    def canonical_json(self) -> str:
        """The JSON that is hashed into the trial id (sorted keys, compact).

        ``until_stable`` is left out of ``warmup`` and ``window`` when unset, so that the
        ids of specs written before it existed do not change."""
        data = self.model_dump(mode="json", exclude={"trial_id", "order", "devices"})
        for key in ("warmup", "window"):
            if isinstance(data.get(key), dict) and data[key].get("until_stable") is None:
                data[key].pop("until_stable", None)
        for key in ("program", "preprocessor"):
            if data.get(key) is None:
                data.pop(key, None)
        if isinstance(data.get("energy"), dict) and data["energy"].get("node") is None:
            data["energy"].pop("node", None)  # specs written before the node meter keep their ids
        return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True)

    def compute_id(self) -> str:
        """sha256(plan + newline + canonical JSON), first 16 hex digits."""
        digest = hashlib.sha256((self.plan + "\n" + self.canonical_json()).encode("utf-8"))
        return digest.hexdigest()[:16]

    def with_id(self) -> TrialSpec:
        """A copy with ``trial_id`` set to :meth:`compute_id`."""
        return self.model_copy(update={"trial_id": self.compute_id()})

    @property
    def unit(self) -> str | None:
        """The unit of work this trial's counts are in: the plan's ``unit:`` for a
        user's own program, else the kind's (:class:`gcbench.kinds.WorkloadKind`)."""
        if self.program and self.program.get("unit"):
            return str(self.program["unit"])
        from gcbench import kinds

        k = kinds.find(self.kind)
        return k.unit if k is not None else None

    @property
    def group(self) -> str:
        """Statistics group: all repetitions of one variant."""
        return self.variant

    def to_json(self) -> str:
        """Plain JSON of the whole spec (id included), for SPEC.json files and XCom."""
        return self.model_dump_json(indent=2)

    @classmethod
    def from_file(cls, path) -> TrialSpec:
        """Load a SPEC.json file; raises pydantic.ValidationError on a bad file."""
        with open(path, encoding="utf-8") as f:
            return cls.model_validate_json(f.read())


def derive_seed(plan_seed: int, variant: str, repetition: int) -> int:
    """A 31-bit seed from the plan seed, the variant label and the repetition index."""
    h = hashlib.sha256(f"{plan_seed}|{variant}|{repetition}".encode()).digest()
    return int.from_bytes(h[:4], "little") & 0x7FFFFFFF
