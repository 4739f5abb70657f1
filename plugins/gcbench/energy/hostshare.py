"""Host-wide meters shared by concurrent trials: which trials measure them, and which
other trials ran on the host while a window was measured (C13).

RAPL's package and DRAM counters cover a whole CPU socket (pyJoules#43, Kepler#295):
every process on the host adds to them. CodeCarbon estimates the whole machine. Two
trials on two GPUs of one host that run at the same time would each book the socket's
whole energy (N-fold with N GPUs). Two defences, both per host:

* **The lease** (:mod:`gcbench.store.gpulock`): a trial that measures a host-wide meter
  (:func:`measures_host_energy`) takes the host lock exclusively, any other trial takes
  it shared, so under the scheduler a measuring trial runs alone on its host.
* **The register** (:class:`HostPresence`): every trial process writes its lifetime
  (CLOCK_MONOTONIC, one clock for every process of a boot, containers included) into a
  host-wide folder (``GCBENCH_HOST_SHARE_DIR``, default ``/tmp/gcbench-host-share``). At
  its end it reads which other trials were alive during each of its windows. Where the
  lease was bypassed (trials started by hand, two runners that do not share a results
  database) the socket's reading of such a window is not this trial's: it is kept as
  ``cpu_energy_socket_j``, ``cpu_energy_j`` becomes this trial's share of it (an equal
  split among the trials alive, :func:`share_of_window`, so concurrent trials add up
  to what the socket drew), and the window is flagged ``cpu_energy_shared`` with the
  other trials named (:func:`apply`).

A node meter (the BMC, ``energy.node``) measures the whole node: it is a host-wide meter
too (the lease), and its figure of a shared window is apportioned alike
(``node_energy_shared``).

Registration and reading take one ``flock`` on the folder's lock file, so a trial that
registers before another's window ends is always seen by it. A process killed with
SIGKILL leaves its entry open: it counts as concurrent for trials that saw it alive
when they started or that it started after (it may have run into their window), and is
dropped by the others.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

DEFAULT_DIR = "/tmp/gcbench-host-share"
LOCK_NAME = ".lock"
STALE_S = 7 * 24 * 3600.0
"""An open entry older than this is dropped whatever it says (a week: longer than any trial)."""
ENDED_KEEP_S = 24 * 3600.0
"""An ended entry is kept this long for trials still measuring (longer than any window)."""

FLAG = "cpu_energy_shared"
NODE_FLAG = "node_energy_shared"


def measures_host_energy(energy: Any) -> bool:
    """Whether a trial with these energy settings (:class:`gcbench.spec.EnergySettings`)
    reads a host-wide meter: RAPL zones under its ``rapl_root``, CodeCarbon (the whole
    machine), or a node meter (the BMC's whole node). Decided by the runner before the
    trial starts (the lease)."""
    if getattr(energy, "codecarbon", False) or getattr(energy, "node", None) is not None:
        return True
    root = Path(getattr(energy, "rapl_root", "") or "")
    try:
        return root.is_dir() and any(p.name.startswith(("intel-rapl:", "intel-rapl-mmio:")) for p in _zones(root))
    except OSError:
        return False


def _zones(root: Path) -> Iterator[Path]:
    for p in root.iterdir():
        yield p
        if p.name in ("intel-rapl", "intel-rapl-mmio") and p.is_dir():
            yield from p.iterdir()


def share_dir() -> Path:
    """The host-wide register folder (``GCBENCH_HOST_SHARE_DIR`` or :data:`DEFAULT_DIR`)."""
    return Path(os.environ.get("GCBENCH_HOST_SHARE_DIR") or DEFAULT_DIR)


def prepare_share_dir(folder: Path | None = None) -> Path:
    """Create the register folder (``folder``, default :func:`share_dir`), writable by
    every user (mode 1777, where this user may set it), and return it. A runner that
    starts a trial container calls it before bind-mounting the folder into the container
    (the engine refuses a bind mount whose source does not exist).

    Raises:
        OSError: the folder cannot be created.
    """
    folder = share_dir() if folder is None else Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    try:
        folder.chmod(0o1777)
    except OSError:
        pass  # another user's folder: it is theirs to open
    return folder


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown"


def _pid_ns() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return "unknown"


def _start_ticks(pid: int) -> str | None:
    """The process's start time (clock ticks since boot, /proc/PID/stat field 22), or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[-1].split()[19]


class HostPresence:
    """One trial process in the host register; see the module docstring.

    Args:
        trial_id, label: the trial and its readable label (variant #repetition).
        folder: the register folder; default :func:`share_dir`.

    Never raises: a register that cannot be written (read-only /tmp, permissions)
    leaves :attr:`note` saying so, and nothing is flagged.
    """

    def __init__(self, trial_id: str, label: str, folder: Path | None = None):
        self.trial_id = trial_id
        self.label = label
        self.folder = Path(folder) if folder is not None else share_dir()
        self.note: str | None = None
        self.path: Path | None = None
        self.start_monotonic = time.monotonic()
        self._alive_at_start: set[str] = set()
        self._entry: dict[str, Any] = {}

    @contextmanager
    def _locked(self) -> Iterator[None]:
        lock = self.folder / LOCK_NAME
        try:  # open without O_CREAT first: another user's file in a sticky folder (protected_regular)
            fd = os.open(lock, os.O_RDWR)
        except FileNotFoundError:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
            try:  # the umask took write from the others: a trial of another user (a capped
                os.fchmod(fd, 0o666)  # trial's container runs as root) must open it too
            except OSError:
                pass
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def register(self) -> HostPresence:
        """Write this process's entry (start now, no end yet)."""
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            try:
                self.folder.chmod(0o1777)
            except OSError:
                pass  # another user's folder: it is theirs to open
            with self._locked():
                self.start_monotonic = time.monotonic()
                for entry in self._entries():
                    if entry.get("end_monotonic") is None and self._alive(entry):
                        self._alive_at_start.add(entry["name"])
                pid = os.getpid()
                self._entry = {
                    "trial_id": self.trial_id,
                    "label": self.label,
                    "pid": pid,
                    "pid_ns": _pid_ns(),
                    "start_ticks": _start_ticks(pid),
                    "boot_id": _boot_id(),
                    "start_monotonic": self.start_monotonic,
                    "end_monotonic": None,
                    "written_unix": time.time(),
                }
                self.path = self.folder / f"{pid}-{self.trial_id}-{int(self.start_monotonic * 1e6)}.json"
                self._write()
        except OSError as exc:
            self.note = f"host register {self.folder} not writable ({exc}): concurrent trials not checked"
            self.path = None
        return self

    def _write(self) -> None:
        assert self.path is not None
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self._entry), encoding="utf-8")
        os.replace(tmp, self.path)

    def _entries(self) -> list[dict[str, Any]]:
        out = []
        boot = _boot_id()
        for p in self.folder.glob("*.json"):
            if self.path is not None and p == self.path:
                continue
            try:
                entry = json.loads(p.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if not isinstance(entry, dict):
                continue
            age_s = time.time() - float(entry.get("written_unix") or 0)
            ended = entry.get("end_monotonic") is not None
            stale = entry.get("boot_id") != boot or age_s > (ENDED_KEEP_S if ended else STALE_S)
            began = entry.get("start_monotonic")
            after_me = self.path is not None and isinstance(began, (int, float)) and began >= self.start_monotonic
            if stale or (
                entry.get("end_monotonic") is None
                and not self._alive(entry)
                and p.name not in self._alive_at_start
                and not after_me  # one that began after this trial and was killed ran beside it
            ):
                if stale:  # from another boot or too old for any trial; a killed trial's entry
                    try:  # stays for the trials that ran beside it
                        p.unlink()
                    except OSError:
                        pass
                continue
            entry["name"] = p.name
            out.append(entry)
        return out

    @staticmethod
    def _alive(entry: dict[str, Any]) -> bool:
        if entry.get("pid_ns") != _pid_ns():
            return True  # another PID namespace (a container): cannot tell, assume alive
        pid = entry.get("pid")
        return isinstance(pid, int) and _start_ticks(pid) == entry.get("start_ticks")

    def concurrent(self, start_monotonic: float, end_monotonic: float) -> list[tuple[str, float, float]]:
        """The other trials alive on this host during [start, end] (monotonic s): (label,
        from, to) clipped to the window; one still running (or killed) counts to the end."""
        if self.path is None:
            return []
        try:
            with self._locked():
                found = []
                for e in self._entries():
                    began, ended = e.get("start_monotonic"), e.get("end_monotonic")
                    if not isinstance(began, (int, float)) or began >= end_monotonic:
                        continue
                    if isinstance(ended, (int, float)) and ended <= start_monotonic:
                        continue
                    to = min(float(ended), end_monotonic) if isinstance(ended, (int, float)) else end_monotonic
                    label = f"{e.get('label')} ({e.get('trial_id')}, pid {e.get('pid')})"
                    found.append((label, max(float(began), start_monotonic), to))
                return sorted(found)
        except OSError:
            return []

    def close(self) -> None:
        """Record this process's end (the entry stays for trials still measuring)."""
        if self.path is None:
            return
        try:
            with self._locked():
                self._entry["end_monotonic"] = time.monotonic()
                self._entry["written_unix"] = time.time()
                self._write()
        except OSError:
            pass


def share_of_window(start: float, end: float, others: list[tuple[str, float, float]]) -> float:
    """This trial's share of a host-wide meter over [start, end], in (0, 1]: the time
    average of 1 / (trials alive), each other trial alive over its (from, to).

    An apportionment under the assumption that the trials alive at an instant draw the
    socket equally (RAPL cannot tell processes apart); flagged wherever it is used.
    """
    if end <= start:
        return 1.0
    edges = sorted({start, end, *(max(start, min(end, t)) for _, a, b in others for t in (a, b))})
    acc = 0.0
    for lo, hi in zip(edges, edges[1:], strict=False):
        mid = (lo + hi) / 2
        n = 1 + sum(1 for _, a, b in others if a <= mid < b)
        acc += (hi - lo) / n
    return acc / (end - start)


def _apply_node(res: dict[str, Any], share: float, others: list[str]) -> None:
    """The node meter's figure of a shared window, like the socket's: the BMC's whole-node
    reading kept as ``node_energy_whole_j``, ``node_energy_j`` this trial's share of it,
    flagged ``node_energy_shared``."""
    node = res.get("node")
    if not isinstance(node, dict) or res.get("node_energy_j") is None:
        return
    res["node_energy_whole_j"] = res["node_energy_j"]
    res["node_energy_j"] = res["node_energy_j"] * share
    node["energy_whole_j"], node["energy_j"] = node.get("energy_j"), res["node_energy_j"]
    node["method"] = f"{node.get('method')}-apportioned"
    node["reason"] = (
        f"shared: {len(others)} other trial(s) ran on this host during the window ({'; '.join(others)}); "
        f"the BMC measures the whole node: this trial's share {share:.3f} of it (equal split among the trials alive)"
    )
    flags = res.setdefault("flags", [])
    if NODE_FLAG not in flags:
        flags.append(NODE_FLAG)


def apply(energy: dict[str, Any], windows: dict[str, Any], origin_monotonic: float, presence: HostPresence) -> dict:
    """Apportion and flag each window's CPU energy that other trials shared (module docstring).

    The socket's reading is kept as ``cpu_energy_socket_j``; ``cpu_energy_j`` (and each
    RAPL domain's ``energy_j``, its ``method`` then ``rapl-apportioned``) becomes this
    trial's share (:func:`share_of_window`), so the figures of concurrent trials add up
    to what the socket drew and none books the whole socket; the window is flagged
    ``cpu_energy_shared`` and ``cpu_reason`` names the other trials. A node meter's figure
    is apportioned the same way (``node_energy_shared``).

    Args:
        energy: ``{window key: EnergyResult dict}`` (changed in place).
        windows: ``{window key: {start_s, end_s}}`` on the trial's clock.
        origin_monotonic: the trial clock's zero (``Meter.origin_monotonic``).
        presence: this trial's register entry.

    Returns:
        ``{"concurrent": {window key: [labels]}, "share": {window key: share}, "note"}``
        for result.json's ``host_share``.
    """
    found: dict[str, list[str]] = {}
    shares: dict[str, float] = {}
    for key, w in (windows or {}).items():
        res = energy.get(key)
        if not isinstance(res, dict) or w.get("start_s") is None or w.get("end_s") is None:
            continue
        start, end = origin_monotonic + w["start_s"], origin_monotonic + w["end_s"]
        others = presence.concurrent(start, end)
        if not others:
            continue
        found[key] = [label for label, _, _ in others]
        share = shares[key] = share_of_window(start, end, others)
        _apply_node(res, share, found[key])
        if res.get("cpu_energy_j") is None and not res.get("cpu"):
            continue  # no CPU figure to apportion
        res["cpu_energy_socket_j"] = res.get("cpu_energy_j")
        if res.get("cpu_energy_j") is not None:
            res["cpu_energy_j"] = res["cpu_energy_j"] * share
        for dom in res.get("cpu") or []:
            if isinstance(dom, dict) and dom.get("energy_j") is not None:
                dom["energy_socket_j"] = dom["energy_j"]
                dom["energy_j"] = dom["energy_j"] * share
                dom["method"] = "rapl-apportioned"
        res["cpu_reason"] = (
            f"shared: {len(others)} other trial(s) ran on this host during the window "
            f"({'; '.join(found[key])}); RAPL counts the whole socket: this trial's share "
            f"{share:.3f} of it (equal split among the trials alive)"
        )
        flags = res.setdefault("flags", [])
        if FLAG not in flags:
            flags.append(FLAG)
    return {"concurrent": found, "share": shares, "note": presence.note}
