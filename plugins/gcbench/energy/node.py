"""Whole-node power from the BMC: the optional ``node`` meter (``energy.node`` in a plan).

A BMC reports the node's power (what its power supplies draw: GPUs, CPUs, memory, fans,
disks, the supplies' own losses) at its own slow pace, about once a second or slower.
The node meter reads it over one of two protocols, in a thread of the sampling process
(:mod:`gcbench.energy.sampler`) every ``period_s``, so a slow or hung BMC never delays
the GPU's reads:

* **IPMI** with ``ipmitool`` over the LAN or in band (``interface: open``, the kernel's
  ``/dev/ipmi0``) (argument lists, never a shell; the password passed in the
  ``IPMI_PASSWORD`` environment variable of ``ipmitool -E``, never on a command line):
  DCMI's power reading (``ipmitool dcmi power reading``: "Instantaneous power reading:
  N Watts": DCMI 1.5's Get Power Reading command), or an SDR sensor whose unit is
  watts (``ipmitool -c sensor reading NAME``), where the BMC has no DCMI (OpenIPMI's
  ``ipmi_sim`` has none: the emulator the tests read answers DCMI with "Invalid command",
  and the sensor path is what they measure through).
* **Redfish** over HTTPS (standard library): ``/redfish/v1/Chassis/<id>/Power``'s
  ``PowerControl[0].PowerConsumedWatts`` (Power 1.x, deprecated since 2020.4), or the
  newer model's ``/redfish/v1/Chassis/<id>/EnvironmentMetrics`` ``PowerWatts.Reading``
  (beside the chassis' ``PowerSubsystem``).

The readings are instant power as the BMC last updated it: the window's node energy is
their trapezoid (:func:`node_window_energy`), with the same edge and coverage rules as
the other power integrations. Too few readings for the window (a window shorter than two
read periods, or no reading within one period of an edge) leaves the figure NULL with
the reason, never a guess from one reading.

The node figure *contains* the GPU, CPU and DRAM figures: it is never added to them
(:func:`gcbench.carbon.energy_total`).
"""

from __future__ import annotations

import base64
import http.client
import json
import re
import shutil
import ssl
import subprocess
import threading
import urllib.error
import urllib.request
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from gcbench.energy import integrate
from gcbench.energy.backend import Facts
from gcbench.energy.base import DeviceEnergy

if TYPE_CHECKING:
    from collections.abc import Callable

    from gcbench.energy.window import DeviceSeries
    from gcbench.spec import IpmiNodeSettings, NodeSettings, RedfishNodeSettings

NODE_LABEL = "node"
"""The device label of node rows in samples.csv."""

IPMI_FACTS = Facts(
    name="ipmi",
    kind="node",
    label="ipmi",
    instant_power=True,
    update_period_s=1.0,
    counter_scope="node",
)
"""The IPMI node meter: instant node power only, updated about every second."""

REDFISH_FACTS = Facts(
    name="redfish",
    kind="node",
    label="redfish",
    instant_power=True,
    update_period_s=1.0,
    counter_scope="node",
)
"""The Redfish node meter: instant node power only, updated about every second."""

MIN_PERIODS_PER_WINDOW = 2.0
"""A window shorter than this many read periods has too few BMC readings: NULL."""


class NodeReadError(Exception):
    """One read of the BMC failed (the message says why)."""


# ----------------------------------------------------------------------------- IPMI


def ipmitool_argv(s: IpmiNodeSettings, *command: str, timeout_s: float = 5.0) -> list[str]:
    """The ``ipmitool`` argument list for ``command`` on the BMC of ``s`` (``-E``: the
    password comes from ``IPMI_PASSWORD`` in the environment, never the command line)."""
    tool = shutil.which("ipmitool") or "ipmitool"
    if s.interface == "open":  # the local BMC in band (/dev/ipmi0): no address, no password
        return [tool, "-I", "open", *command]
    assert s.host is not None and s.user is not None  # IpmiNodeSettings requires them over a LAN
    argv = [tool, "-I", s.interface, "-H", s.host, "-p", str(s.port)]
    argv += ["-U", s.user, "-E", "-N", str(max(1, int(round(timeout_s / 2)))), "-R", "1"]
    if s.interface == "lanplus" and s.cipher_suite is not None:
        argv += ["-C", str(s.cipher_suite)]
    return [*argv, *command]


_DCMI_POWER_RE = re.compile(r"Instantaneous power reading:\s*([0-9.]+)\s*Watts", re.IGNORECASE)
_DCMI_STATE_RE = re.compile(r"Power reading state is:\s*(\w+)", re.IGNORECASE)


def parse_dcmi_power(text: str) -> float:
    """Watts of ``ipmitool dcmi power reading``'s output.

    Raises:
        NodeReadError: no instantaneous reading, or the BMC's power reading is deactivated.
    """
    state = _DCMI_STATE_RE.search(text)
    if state and state.group(1).lower() != "activated":
        raise NodeReadError(f"DCMI power reading is {state.group(1)} on this BMC")
    m = _DCMI_POWER_RE.search(text)
    if not m:
        raise NodeReadError(f"no DCMI power reading in ipmitool's answer: {text.strip()[:200]!r}")
    return float(m.group(1))


def parse_sensor_csv(text: str, name: str) -> float:
    """Watts of ``ipmitool -c sensor reading NAME`` (``NAME,VALUE``).

    Raises:
        NodeReadError: the sensor is absent or has no reading (``na``).
    """
    for line in text.splitlines():
        head, _, value = line.strip().rpartition(",")
        if head == name:
            try:
                return float(value)
            except ValueError:
                raise NodeReadError(f"sensor {name!r} has no reading ({value!r})") from None
    raise NodeReadError(f"sensor {name!r} not in ipmitool's answer: {text.strip()[:200]!r}")


def watts_sensors(sdr_csv: str) -> list[str]:
    """Names of the sensors in watts in ``ipmitool -c sdr list full`` (``name,value,unit,status``)."""
    out = []
    for line in sdr_csv.splitlines():
        parts = line.strip().split(",")
        if len(parts) >= 3 and parts[2].strip().lower() == "watts":
            out.append(parts[0])
    return out


# ----------------------------------------------------------------------------- Redfish


def parse_redfish_power(doc: dict) -> float:
    """Watts of a Redfish ``Power`` resource (``PowerControl[0].PowerConsumedWatts``) or
    an ``EnvironmentMetrics`` resource (``PowerWatts.Reading``).

    Raises:
        NodeReadError: neither reading is in the document (or it is null).
    """
    metrics = doc.get("PowerWatts")
    if isinstance(metrics, dict) and isinstance(metrics.get("Reading"), (int, float)):
        return float(metrics["Reading"])
    for pc in doc.get("PowerControl") or []:
        if isinstance(pc, dict) and isinstance(pc.get("PowerConsumedWatts"), (int, float)):
            return float(pc["PowerConsumedWatts"])
    raise NodeReadError(f"no power reading in Redfish resource {doc.get('@odata.id', '?')}")


class _Redfish:
    """GETs of one Redfish service (basic authentication, a timeout)."""

    def __init__(self, s: RedfishNodeSettings, password: str | None, timeout_s: float):
        self.root = s.url.rstrip("/")
        self.timeout_s = timeout_s
        self.headers = {"Accept": "application/json"}
        if s.user:
            token = base64.b64encode(f"{s.user}:{password or ''}".encode()).decode()
            self.headers["Authorization"] = f"Basic {token}"
        self.context = None if s.verify_tls else ssl._create_unverified_context()

    def get(self, path: str) -> dict:
        req = urllib.request.Request(self.root + path, headers=self.headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s, context=self.context) as r:
                return json.loads(r.read().decode("utf-8"))
        except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as exc:
            raise NodeReadError(f"GET {path}: {exc}") from None


def redfish_power_path(client: Any, chassis: str | None) -> str:
    """The path of the resource that reports the node's power: the chassis' (the first
    one that has one when ``chassis`` is None) ``EnvironmentMetrics`` when it has a
    ``PowerSubsystem``, else its ``Power``.

    Raises:
        NodeReadError: no chassis reports power.
    """
    if chassis:
        members = [f"/redfish/v1/Chassis/{chassis}"]
    else:
        coll = client.get("/redfish/v1/Chassis")
        members = [m["@odata.id"] for m in coll.get("Members") or [] if isinstance(m, dict) and "@odata.id" in m]
    tried = []
    for path in members:
        ch = client.get(path)
        for key in ("EnvironmentMetrics", "Power"):
            link = ch.get(key)
            if isinstance(link, dict) and link.get("@odata.id"):
                target = link["@odata.id"]
                try:
                    parse_redfish_power(client.get(target))
                except NodeReadError as exc:
                    tried.append(str(exc))
                    continue
                return target
        tried.append(f"{path}: no EnvironmentMetrics or Power")
    raise NodeReadError("no Redfish chassis reports power: " + "; ".join(tried or ["no chassis"]))


# ----------------------------------------------------------------------------- the reader


@dataclass
class NodeProbe:
    """What :meth:`NodeReader.probe` found.

    Attributes:
        ok: a reading came back.
        protocol: ``ipmi`` or ``redfish``.
        how: what is read (``dcmi``, ``sensor 'Node Power'``, a Redfish path).
        power_w: the reading, W (None when not ok).
        why_not: why there is no node meter (None when ok).
    """

    ok: bool
    protocol: str
    how: str | None = None
    power_w: float | None = None
    why_not: str | None = None

    def to_dict(self) -> dict:
        return {
            "ok": self.ok,
            "protocol": self.protocol,
            "how": self.how,
            "power_w": self.power_w,
            "why_not": self.why_not,
        }


class NodeReader:
    """Reads the node's power from its BMC (one protocol of :class:`gcbench.spec.NodeSettings`).

    Args:
        settings: the plan's ``energy.node``.
        password: the password read from the environment (None: none set).
        how: what :meth:`probe` chose (``dcmi``, ``sensor:NAME``, a Redfish path); None
            until probed.
    """

    def __init__(
        self,
        settings: NodeSettings,
        password: str | None,
        how: str | None = None,
    ):
        self.settings = settings
        self.password = password
        self.how = how
        self.protocol = "ipmi" if settings.ipmi is not None else "redfish"
        self.facts = IPMI_FACTS if self.protocol == "ipmi" else REDFISH_FACTS
        self._redfish = (
            _Redfish(settings.redfish, password, settings.timeout_s) if settings.redfish is not None else None
        )

    def _ipmi(self, *command: str) -> str:
        s = self.settings.ipmi
        assert s is not None
        if not shutil.which("ipmitool"):
            raise NodeReadError("ipmitool is not installed (Debian: apt-get install ipmitool)")
        env = {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "IPMI_PASSWORD": self.password or ""}
        rc, out = _run(ipmitool_argv(s, *command, timeout_s=self.settings.timeout_s), env, self.settings.timeout_s)
        if rc != 0:
            raise NodeReadError(f"ipmitool {' '.join(command)} failed ({rc}): {out.strip()[-300:]}")
        return out

    def probe(self) -> NodeProbe:
        """Choose what to read and read it once. Never raises: a failure is the finding."""
        try:
            if self.protocol == "redfish":
                assert self._redfish is not None and self.settings.redfish is not None
                self.how = redfish_power_path(self._redfish, self.settings.redfish.chassis)
                return NodeProbe(True, "redfish", self.how, self.read_w())
            s = self.settings.ipmi
            assert s is not None
            errors = []
            if s.reading in ("auto", "dcmi"):
                try:
                    self.how = "dcmi"
                    return NodeProbe(True, "ipmi", "dcmi", self.read_w())
                except NodeReadError as exc:
                    self.how = None
                    if s.reading == "dcmi":
                        raise
                    errors.append(f"DCMI: {exc}")
            try:
                name = s.sensor
                if name is None:
                    found = watts_sensors(self._ipmi("-c", "sdr", "list", "full"))
                    if len(found) != 1:
                        raise NodeReadError(
                            f"the BMC has {len(found)} sensors in watts ({', '.join(found)}): name one as sensor"
                            if found
                            else "the BMC has no sensor in watts"
                        )
                    name = found[0]
                self.how = f"sensor:{name}"
                return NodeProbe(True, "ipmi", self.how, self.read_w())
            except NodeReadError as exc:
                self.how = None
                raise NodeReadError("; ".join([*errors, f"sensor: {exc}"])) from None
        except NodeReadError as exc:
            return NodeProbe(False, self.protocol, None, None, str(exc))

    def read_w(self) -> float:
        """The node's power now, W.

        Raises:
            NodeReadError: the read failed (unknown: the row is not written).
        """
        if self.how is None:
            raise NodeReadError("node meter not probed")
        if self.protocol == "redfish":
            assert self._redfish is not None
            return parse_redfish_power(self._redfish.get(self.how))
        if self.how == "dcmi":
            return parse_dcmi_power(self._ipmi("dcmi", "power", "reading"))
        name = self.how.removeprefix("sensor:")
        return parse_sensor_csv(self._ipmi("-c", "sensor", "reading", name), name)


def _run(argv: list[str], env: dict, timeout_s: float) -> tuple[int, str]:
    try:
        p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return 124, f"no answer within {timeout_s:g} s"
    except OSError as exc:
        return 127, str(exc)
    return p.returncode, p.stdout + p.stderr


class NodePoller:
    """A thread that reads the BMC every ``period_s`` and queues ``(t_s, power_w)``,
    timed at the middle of each read on the sampler's clock; failed reads queue
    ``(t_s, None, why)`` (a gap, never 0)."""

    def __init__(self, reader: NodeReader, period_s: float, now: Callable[[], float]):
        self.reader, self.period_s, self.now = reader, period_s, now
        self.rows: deque[tuple[float, float | None, str | None]] = deque()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gcbench-node", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _loop(self) -> None:
        next_t = self.now()
        while not self._stop.is_set():
            t0 = self.now()
            try:
                p, why = self.reader.read_w(), None
            except NodeReadError as exc:
                p, why = None, str(exc)
            self.rows.append(((t0 + self.now()) / 2, p, why))
            next_t = max(next_t + self.period_s, self.now())
            self._stop.wait(max(0.0, next_t - self.now()))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.reader.settings.timeout_s + 1.0)

    def drain(self) -> list[tuple[float, float | None, str | None]]:
        out = []
        while self.rows:
            out.append(self.rows.popleft())
        return out


# ----------------------------------------------------------------------------- window energy


def node_window_energy(
    series: DeviceSeries | None, start_s: float, end_s: float, period_s: float, protocol: str | None = None
) -> DeviceEnergy:
    """The node's energy over [start_s, end_s], J: trapezoid of the BMC's readings.

    Args:
        series: the node rows of samples.csv (None: none were written).
        period_s: the read period (the BMC's readings are no fresher than this).
        protocol: ``ipmi`` or ``redfish`` (default: the rows' source).

    Returns:
        :class:`DeviceEnergy` with ``scope = node``; ``energy_j`` None, with the reason,
        when the window is shorter than :data:`MIN_PERIODS_PER_WINDOW` periods or the
        readings do not reach within one period of each edge.
    """
    source = protocol or (series.source if series is not None else "ipmi")
    facts = REDFISH_FACTS if source == "redfish" else IPMI_FACTS
    dev = DeviceEnergy(
        device=NODE_LABEL,
        energy_j=None,
        method="unavailable",
        source=facts.name,
        update_period_s=period_s,
        scope="node",
    )
    duration_s = end_s - start_s
    if series is None:
        dev.reason = "no node readings (the BMC did not answer)"
        return dev
    ok = np.isfinite(series.power_instant_w)
    t, p = series.t_s[ok], series.power_instant_w[ok]
    if duration_s < MIN_PERIODS_PER_WINDOW * period_s:
        dev.reason = (
            f"too few BMC readings: the window of {duration_s:.3g} s is shorter than "
            f"{MIN_PERIODS_PER_WINDOW:g} read periods of {period_s:g} s"
        )
        return dev
    if t.size < 2 or t[0] > start_s + period_s or t[-1] < end_s - period_s:
        first = f"{t[0] - start_s:+.2f} s" if t.size else "none"
        last = f"{t[-1] - end_s:+.2f} s" if t.size else "none"
        dev.reason = (
            f"too few BMC readings: {t.size} readings, none within one period ({period_s:g} s) of an edge "
            f"(first {first} from the start, last {last} from the end)"
        )
        return dev
    dev.energy_j = integrate.power_integral_j(t, p, start_s, end_s)
    dev.method = facts.method("power-integration")
    inside = int(((t >= start_s) & (t <= end_s)).sum())
    dev.reason = f"{inside} BMC readings in the window, every {period_s:g} s; instant node power integrated"
    return dev


def password_env(settings: NodeSettings) -> str | None:
    """The name of the environment variable holding the BMC's password (None: none, as
    in band through ``interface: open``)."""
    if settings.ipmi is not None:
        return None if settings.ipmi.interface == "open" else settings.ipmi.password_env
    return settings.redfish.password_env if settings.redfish is not None else None


def probe_settings(settings: NodeSettings, env: dict) -> tuple[NodeReader, NodeProbe]:
    """A reader of ``settings`` with its password from ``env``, probed once."""
    name = password_env(settings)
    password = env.get(name) if name else None
    reader = NodeReader(settings, password)
    if name and password is None:
        return reader, NodeProbe(False, reader.protocol, None, None, f"environment variable {name} is not set")
    return reader, reader.probe()


def wait_s(settings: NodeSettings) -> float:
    """How long the sampler reads on after the last window's end so that one reading
    follows it: 1.5 read periods plus one read's timeout at most."""
    return 1.5 * settings.period_s + 0.2
