"""A trial's own CPUs: which cores it runs on, how many threads it starts, and how much
of those cores other processes took while a window was measured.

**Why.** PyTorch's intra-op pool starts one thread per core and waits for the slowest at
every operator: one busy core elsewhere on the machine (the sampler, an Airflow worker, a
trial on the host's other GPU, another user) stalls each step, and a TinyLM step ran
35-80x slower beside one CPU-bound process (issue 23). So every trial runs on an explicit
CPU set with thread counts to match, and each window records the CPU time others took
on those cores.

**The split** (:func:`plan_cpus`): the CPUs this process may use
(``os.sched_getaffinity(0)``) are cut into one slice per GPU slot of the host, and a
trial gets the slices of its GPUs. The GPUs are those of ``/sys/bus/pci/devices`` with
NVIDIA's vendor id and a display class, in PCI bus order (CUDA's ``PCI_BUS_ID`` order and
NVML's indices, as the runners set); without one there (a CPU host measuring the
simulated device) the slots are the runner's host devices (``GCBENCH_HOST_DEVICES``, the
plan's devices of that host) and the trial's own. When ``/sys`` gives every GPU a NUMA
node (``/sys/bus/pci/devices/<bus id>/numa_node``) with CPUs
(``/sys/devices/system/node/node<N>/cpulist``), each node's CPUs are split among the
GPUs on it, so a trial sits next to its GPU; otherwise the CPUs are split evenly, in
order. The split is a pure function of the host and the GPU index, and two trials that
run at once hold different GPUs (the GPU lease, :mod:`gcbench.store.gpulock`, is
exclusive per GPU): their slices never overlap, with no lock of their own. Not covered:
trials whose runners see different CPUs (another cpuset), ``cpus: all``, a host with
more GPUs than CPUs (slices then share a core; recorded as ``shared``).

**The setting** ``cpus`` (a trial-level setting, :data:`gcbench.spec.TRIAL_SETTINGS`):
``auto`` (default) the trial's slices; a count N, the first N CPUs of them (more than
they hold runs on what they hold, said in ``settings_not_in_effect``); ``all`` every CPU
of the process, shared with whatever else runs.

**Threads** (:meth:`CpuPlan.threads`): one intra-op thread per CPU of the set
(``torch.set_num_threads``, ``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``) and one inter-op
thread (``torch.set_num_interop_threads(1)``: GC-Bench's workloads use no inter-op
parallelism, and a second pool would compete with the first on the same cores).

**Contention** (:class:`ContentionProbe`, :func:`contention`): at each edge of a window,
the busy clock ticks of the trial's CPUs (``/proc/stat``: user + nice + system + irq +
softirq + steal; idle and iowait are not busy, guest time is inside user) and the CPU
time of the trial's process tree (``/proc/<pid>/stat`` utime + stime + cutime + cstime of
the trial process and every live descendant: the c-times hold the descendants already
reaped). Then, over the window of T s on n CPUs::

    others_s = max(0, sum over the set of d(busy ticks) - d(tree ticks)) / CLK_TCK
    cpu_contention_share = others_s / (n * T)          (0..1, clipped)

the share of the trial's core-seconds that other processes (and the kernel's interrupt
work for them) used. Limits: ticks are 1/CLK_TCK s (10 ms), and each counter read is
whole ticks, so others' time at or below 2 (n + processes in the tree) ticks
(:func:`resolution_ticks`, ``resolution_s``) may be the readings' own rounding: the
validation rule judges a window's share only beyond it (a 0.1-s tokenize window reads
tens of percent from rounding alone); the tree's time counts as spent on its
set (true while it is pinned: a descendant that widens its own affinity, or work done
for the trial outside its tree, such as a container started through the Docker engine,
counts as others or hides others'); steal time (the hypervisor running other guests)
counts as others. A single-threaded hog on one of n cores shows as about 1/(2n), while
it can stall a pool of n threads far more: thresholds are low
(:class:`gcbench.plan.schema.ValidationSettings`).
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

SYS_ROOT = "/sys"
PROC_ROOT = "/proc"
NVIDIA_VENDOR = "0x10de"
DISPLAY_CLASSES = ("0x0300", "0x0302")
"""PCI class prefixes of a GPU: VGA-compatible and 3D controllers (PCI code and ID
assignment specification, base class 03h)."""

HOST_DEVICES_ENV = "GCBENCH_HOST_DEVICES"
"""The runner's GPU indices of this host (comma-separated): the slots of the split when
``/sys`` shows no GPU."""

CPUS_DEFAULT = "auto"
"""The ``cpus`` setting's default (:data:`gcbench.spec.TRIAL_SETTINGS`)."""


def parse_cpulist(text: str) -> list[int]:
    """``"0-3,8,10-11"`` -> ``[0, 1, 2, 3, 8, 10, 11]`` (the kernel's cpulist format).

    Raises:
        ValueError: not a cpulist.
    """
    out: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        a, b = int(lo), int(hi or lo)
        if b < a:
            raise ValueError(f"bad cpulist range {part!r}")
        out.update(range(a, b + 1))
    return sorted(out)


def format_cpulist(cpus: list[int]) -> str:
    """``[0, 1, 2, 3, 8]`` -> ``"0-3,8"``."""
    cpus = sorted(set(cpus))
    parts: list[str] = []
    i = 0
    while i < len(cpus):
        j = i
        while j + 1 < len(cpus) and cpus[j + 1] == cpus[j] + 1:
            j += 1
        parts.append(str(cpus[i]) if i == j else f"{cpus[i]}-{cpus[j]}")
        i = j + 1
    return ",".join(parts)


@dataclass(frozen=True)
class GpuPlace:
    """One GPU as ``/sys`` sees it: its index in PCI bus order, bus id, NUMA node (None: unknown)."""

    index: int
    bus_id: str
    numa_node: int | None


def host_gpus(sys_root: str | Path = SYS_ROOT) -> list[GpuPlace]:
    """The host's NVIDIA GPUs in PCI bus order (NVML's and ``PCI_BUS_ID`` CUDA's order),
    with their NUMA nodes; ``[]`` where ``/sys`` has none or cannot be read."""
    base = Path(sys_root) / "bus" / "pci" / "devices"
    found: list[tuple[str, int | None]] = []
    try:
        entries = sorted(base.iterdir(), key=lambda p: p.name)
    except OSError:
        return []
    for dev in entries:
        try:
            vendor = (dev / "vendor").read_text().strip().lower()
            klass = (dev / "class").read_text().strip().lower()
        except OSError:
            continue
        if vendor != NVIDIA_VENDOR or not klass.startswith(DISPLAY_CLASSES):
            continue
        node: int | None
        try:
            node = int((dev / "numa_node").read_text().strip())
        except (OSError, ValueError):
            node = None
        found.append((dev.name, node if node is not None and node >= 0 else None))
    return [GpuPlace(i, bus, node) for i, (bus, node) in enumerate(found)]


def node_cpus(sys_root: str | Path = SYS_ROOT) -> dict[int, list[int]]:
    """``{NUMA node: its CPUs}`` from ``/sys/devices/system/node/node*/cpulist``; ``{}`` when unknown."""
    out: dict[int, list[int]] = {}
    base = Path(sys_root) / "devices" / "system" / "node"
    try:
        nodes = list(base.glob("node[0-9]*"))
    except OSError:
        return {}
    for p in nodes:
        try:
            out[int(p.name[4:])] = parse_cpulist((p / "cpulist").read_text())
        except (OSError, ValueError):
            continue
    return out


def _chunk(seq: list[int], k: int, m: int) -> tuple[list[int], bool]:
    """The k-th of m contiguous, near-equal parts of ``seq`` (and whether it had to share a CPU)."""
    part = seq[k * len(seq) // m : (k + 1) * len(seq) // m]
    if part or not seq:
        return part, False
    return [seq[k % len(seq)]], True


def gpu_slices(
    slots: int, available: list[int], gpus: list[GpuPlace], nodes: dict[int, list[int]]
) -> tuple[dict[int, list[int]], str, set[int]]:
    """The CPUs of each GPU slot: ``({slot: cpus}, how, slots that share a CPU)``.

    NUMA-near when every slot is a GPU of ``gpus`` with a node whose CPUs this process
    may use (each node's CPUs split among its GPUs in index order), else an even split
    of ``available`` in order. ``how`` says which, in words.
    """
    avail = sorted(set(available))
    allowed = set(avail)
    shared: set[int] = set()
    if gpus and len(gpus) == slots and all(g.numa_node is not None for g in gpus) and nodes:
        out: dict[int, list[int]] = {}
        ok = True
        for node in sorted({g.numa_node for g in gpus if g.numa_node is not None}):
            near = [c for c in nodes.get(node, []) if c in allowed]
            members = sorted(g.index for g in gpus if g.numa_node == node)
            if not near:
                ok = False
                break
            for k, idx in enumerate(members):
                out[idx], was_shared = _chunk(near, k, len(members))
                if was_shared:
                    shared.add(idx)
        if ok:
            return out, "NUMA node of each GPU (/sys), its CPUs split among the GPUs on it", shared
    out = {}
    for i in range(slots):
        out[i], was_shared = _chunk(avail, i, slots)
        if was_shared:
            shared.add(i)
    return out, f"even split of this process's {len(avail)} CPUs among {slots} GPU slot(s)", shared


@dataclass
class CpuPlan:
    """The CPU set a trial runs on and why.

    Attributes:
        cpus: the CPU numbers, sorted.
        setting: the plan's ``cpus`` value (``auto``, ``all`` or a count).
        how: how the set was chosen, in words.
        shared: the set may overlap another concurrent trial's (``cpus: all``, no GPU,
            more GPU slots than CPUs).
        numa_nodes: the NUMA nodes of the trial's GPUs, when known.
        not_in_effect: why the setting did not run as asked (a count above the trial's
            share of the host), or None.
        available: the CPUs this process could use.
    """

    cpus: list[int]
    setting: Any = CPUS_DEFAULT
    how: str = ""
    shared: bool = False
    numa_nodes: list[int] = field(default_factory=list)
    not_in_effect: str | None = None
    available: list[int] = field(default_factory=list)

    def threads(self) -> dict[str, int]:
        """Thread counts that go with the set (module docstring)."""
        n = max(1, len(self.cpus))
        return {"torch_intra_op": n, "torch_inter_op": 1, "OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n}

    def to_dict(self) -> dict[str, Any]:
        """For result.json's ``cpus``."""
        d = asdict(self)
        d["cpu_list"] = format_cpulist(self.cpus)
        d["count"] = len(self.cpus)
        d["available"] = format_cpulist(self.available)
        d["threads"] = self.threads()
        return d


def _host_devices_env() -> list[int]:
    raw = os.environ.get(HOST_DEVICES_ENV) or ""
    out = []
    for part in raw.split(","):
        part = part.strip()
        if part.isdigit():
            out.append(int(part))
    return out


def plan_cpus(
    devices: list[int],
    setting: Any = CPUS_DEFAULT,
    *,
    available: list[int] | None = None,
    host_devices: list[int] | None = None,
    sys_root: str | Path = SYS_ROOT,
) -> CpuPlan:
    """The CPU set of a trial on GPUs ``devices`` (module docstring).

    Args:
        devices: the trial's host GPU indices (its lease).
        setting: ``auto``, ``all`` or a count (validated by the plan, :func:`cpus_setting_problem`).
        available: the CPUs to split; default ``os.sched_getaffinity(0)``.
        host_devices: GPU indices of this host known to the runner; default
            ``GCBENCH_HOST_DEVICES``. Used only where ``/sys`` shows no GPU.
        sys_root: ``/sys`` (tests give a fake tree).
    """
    avail = sorted(available if available is not None else os.sched_getaffinity(0))
    if setting == "all":
        return CpuPlan(
            avail, setting, "all: every CPU of the process, shared with whatever else runs", True, [], None, avail
        )
    if not devices:
        return _count(
            CpuPlan(avail, setting, "no GPU leased: every CPU of the process (shared)", True, [], None, avail)
        )
    gpus = host_gpus(sys_root)
    known = host_devices if host_devices is not None else _host_devices_env()
    slots = max([len(gpus), *(d + 1 for d in known), *(d + 1 for d in devices)])
    source = "GPUs in /sys" if gpus else "the runner's host devices" if known else "the trial's own devices"
    nodes = node_cpus(sys_root) if gpus else {}
    slices, how, shared = gpu_slices(slots, avail, gpus if len(gpus) == slots else [], nodes)
    cpus = sorted({c for d in devices for c in slices.get(d, [])})
    numa = sorted({g.numa_node for g in gpus if g.index in devices and g.numa_node is not None})
    text = f"slice of GPU(s) {', '.join(map(str, sorted(devices)))}: {how} ({slots} slot(s) from {source})"
    return _count(CpuPlan(cpus, setting, text, bool(shared & set(devices)), numa, None, avail))


def _count(plan: CpuPlan) -> CpuPlan:
    """A count setting keeps the first N CPUs of the set (or says it could not)."""
    setting, cpus = plan.setting, plan.cpus
    if isinstance(setting, int) and not isinstance(setting, bool):
        if setting <= len(cpus):
            plan.cpus = cpus[:setting]
            plan.how += f"; its first {setting} CPU(s) (cpus: {setting})"
        else:
            plan.not_in_effect = (
                f"cpus: {setting} asked, but the trial's share of this host holds {len(cpus)} CPU(s) "
                f"({format_cpulist(cpus)}): it ran on those"
            )
    return plan


def apply(plan: CpuPlan, environ: dict[str, str] | None = None) -> dict[str, Any]:
    """Pin every thread of this process to ``plan.cpus`` and set the thread variables
    (``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``) in ``environ`` (default ``os.environ``),
    before torch is imported; what runs after (the sampler, a user's program) inherits
    both. Never raises.

    Returns:
        ``{"applied": bool, "error": str | None, "replaced_env": {name: value before}}``.
    """
    env = os.environ if environ is None else environ
    out: dict[str, Any] = {"applied": False, "error": None, "replaced_env": {}}
    threads = plan.threads()
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        before = env.get(name)
        if before is not None and before != str(threads[name]):
            out["replaced_env"][name] = before
        env[name] = str(threads[name])
    if not plan.cpus:
        out["error"] = "empty CPU set: not pinned"
        return out
    try:
        tids = [int(t) for t in os.listdir(f"{PROC_ROOT}/self/task")]
    except OSError:
        tids = [0]
    try:
        for tid in tids:
            try:
                os.sched_setaffinity(tid, plan.cpus)
            except ProcessLookupError:
                continue  # a thread that ended meanwhile
        out["applied"] = sorted(os.sched_getaffinity(0)) == sorted(plan.cpus)
    except OSError as exc:
        out["error"] = f"sched_setaffinity to {format_cpulist(plan.cpus)} failed: {exc}"
    return out


def apply_torch_threads(plan: CpuPlan) -> dict[str, Any]:
    """Set torch's intra-op and inter-op thread counts (when torch is imported); returns
    what is in effect afterwards (``{}`` without torch). Never raises: inter-op threads
    can be set only before the pool starts, and then the count in effect is recorded."""
    import sys

    torch = sys.modules.get("torch")
    if torch is None:
        return {}
    threads = plan.threads()
    out: dict[str, Any] = {}
    try:
        if torch.get_num_threads() != threads["torch_intra_op"]:
            torch.set_num_threads(threads["torch_intra_op"])
    except Exception as exc:  # noqa: BLE001 - recorded, the trial goes on
        out["intra_op_error"] = str(exc)
    try:
        if torch.get_num_interop_threads() != threads["torch_inter_op"]:
            torch.set_num_interop_threads(threads["torch_inter_op"])
    except Exception as exc:  # noqa: BLE001 - RuntimeError once the pool has started
        out["inter_op_error"] = str(exc)
    out.update(torch_threads_in_effect())
    return out


def torch_threads_in_effect() -> dict[str, int]:
    """torch's intra-op and inter-op thread counts now (``{}`` when torch is not imported)."""
    import sys

    torch = sys.modules.get("torch")
    if torch is None:
        return {}
    try:
        return {"torch_intra_op": int(torch.get_num_threads()), "torch_inter_op": int(torch.get_num_interop_threads())}
    except Exception:  # noqa: BLE001 - a torch that cannot answer
        return {}


# ----------------------------------------------------------------------------------
# Contention: CPU time of other processes on the trial's CPUs
# ----------------------------------------------------------------------------------

BUSY_FIELDS = (0, 1, 2, 5, 6, 7)
"""Fields of a ``/proc/stat`` cpuN line that are busy time: user, nice, system, irq,
softirq, steal (proc(5)); idle (3) and iowait (4) are not, guest (8, 9) is inside user."""


def cpu_busy_ticks(cpus: list[int], proc_root: str | Path = PROC_ROOT) -> dict[int, int]:
    """``{cpu: busy ticks since boot}`` for ``cpus`` from ``/proc/stat``.

    Raises:
        OSError: /proc/stat unreadable; KeyError: a CPU missing from it (offline).
    """
    wanted = set(cpus)
    out: dict[int, int] = {}
    with open(Path(proc_root) / "stat", encoding="ascii") as f:
        for line in f:
            if not line.startswith("cpu") or line.startswith("cpu "):
                continue
            name, *values = line.split()
            cpu = int(name[3:])
            if cpu in wanted:
                nums = [int(v) for v in values]
                out[cpu] = sum(nums[i] for i in BUSY_FIELDS if i < len(nums))
    missing = wanted - set(out)
    if missing:
        raise KeyError(f"CPU(s) {format_cpulist(sorted(missing))} not in /proc/stat (offline?)")
    return out


def _stat_fields(pid: int, proc_root: Path) -> list[str] | None:
    try:
        text = (proc_root / str(pid) / "stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[-1].split()  # the command name may hold spaces and ')'


def tree_ticks(root_pid: int, proc_root: str | Path = PROC_ROOT) -> int:
    """CPU ticks of process ``root_pid`` and its live descendants: utime + stime +
    cutime + cstime of each (``/proc/<pid>/stat`` fields 14-17; the c-times hold the
    descendants each one reaped). A process that cannot be read counts 0.

    Raises:
        OSError: ``/proc`` cannot be listed.
    """
    return _tree(root_pid, proc_root)[0]


def _tree(root_pid: int, proc_root: str | Path = PROC_ROOT) -> tuple[int, int]:
    """(:func:`tree_ticks`, how many live processes the tree holds)."""
    root = Path(proc_root)
    parents: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for entry in os.listdir(root):
        if not entry.isdigit():
            continue
        fields = _stat_fields(int(entry), root)
        if fields is None or len(fields) < 15:
            continue
        pid = int(entry)
        parents[pid] = int(fields[1])
        ticks[pid] = sum(int(v) for v in fields[11:15])
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    total, todo, seen = 0, [root_pid], set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        total += ticks.get(pid, 0)
        todo.extend(children.get(pid, []))
    return total, len(seen & ticks.keys())


def clock_ticks_per_s() -> int:
    """``CLK_TCK``: the unit of /proc's CPU times (100 on Linux)."""
    try:
        return int(os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError):
        return 100


@dataclass(frozen=True)
class Snapshot:
    """One edge of a window: monotonic time, busy ticks per CPU of the set, the tree's ticks
    and how many processes it held."""

    t_monotonic: float
    busy: dict[int, int]
    own: int
    own_processes: int = 1


def snapshot(cpus: list[int], pid: int | None = None, proc_root: str | Path = PROC_ROOT) -> Snapshot:
    """Read one :class:`Snapshot` (raises OSError/KeyError/ValueError where /proc cannot tell)."""
    busy = cpu_busy_ticks(cpus, proc_root)
    own, n_proc = _tree(pid or os.getpid(), proc_root)
    return Snapshot(time.monotonic(), busy, own, max(1, n_proc))


def resolution_ticks(n_cpus: int, n_processes: int) -> int:
    """How many ticks of "others" the readings alone can make up: each edge's counters are
    whole ticks, so the difference of each CPU's user and system time, and of each tree
    process's utime and stime, is off by less than one tick: ``2 n_cpus + 2 n_processes``.
    Others' time at or below it is not told apart from nothing (a 0.1-s window on 2 CPUs
    with 4 processes: 12 ticks = 60 % of its 0.2 core-s; a 1.2-s window: 5 %)."""
    return 2 * n_cpus + 2 * n_processes


def contention(begin: Snapshot, end: Snapshot, ticks_per_s: int | None = None) -> dict[str, Any]:
    """CPU time of other processes on the set between two snapshots (module docstring).

    Returns:
        ``{"share", "others_s", "resolution_s", "beyond_resolution", "own_s", "busy_s",
        "capacity_s", "window_s", "n_cpus", "per_cpu_busy_share"}``: share in 0..1 of the
        set's core-seconds used by others; seconds of CPU time; resolution_s the others'
        time the whole-tick readings alone can make up (:func:`resolution_ticks`) and
        beyond_resolution whether others_s exceeds it; per_cpu_busy_share
        ``{cpu: busy share}`` (the trial's and others' work together).
    """
    hz = ticks_per_s or clock_ticks_per_s()
    window_s = max(0.0, end.t_monotonic - begin.t_monotonic)
    n = len(begin.busy)
    busy = {c: max(0, end.busy.get(c, 0) - begin.busy[c]) for c in begin.busy}
    busy_ticks = sum(busy.values())
    own_ticks = max(0, end.own - begin.own)
    others_ticks = max(0, busy_ticks - own_ticks)
    others_s = others_ticks / hz
    capacity_s = n * window_s
    share = min(1.0, others_s / capacity_s) if capacity_s > 0 else None
    res_ticks = resolution_ticks(n, max(begin.own_processes, end.own_processes))
    return {
        "share": share,
        "others_s": others_s,
        "resolution_s": res_ticks / hz,
        "beyond_resolution": others_ticks > res_ticks,
        "own_s": own_ticks / hz,
        "busy_s": busy_ticks / hz,
        "capacity_s": capacity_s,
        "window_s": window_s,
        "n_cpus": n,
        "per_cpu_busy_share": {
            str(c): (min(1.0, b / hz / window_s) if window_s > 0 else None) for c, b in sorted(busy.items())
        },
    }


class ContentionProbe:
    """Measures :func:`contention` over each window of a trial; never raises.

    Args:
        cpus: the trial's CPU set.
        pid: the root of the trial's process tree (default this process).
        proc_root: ``/proc`` (tests give a fake tree).

    :meth:`begin` before a window opens, :meth:`end` after it closes; :attr:`windows`
    holds ``{key: contention dict}``, or ``{key: {"share": None, "error": why}}`` where
    /proc could not tell.
    """

    def __init__(self, cpus: list[int], pid: int | None = None, proc_root: str | Path = PROC_ROOT):
        self.cpus = sorted(cpus)
        self.pid = pid or os.getpid()
        self.proc_root = proc_root
        self.windows: dict[str, dict[str, Any]] = {}
        self._open: dict[str, Snapshot | str] = {}

    def _read(self) -> Snapshot | str:
        if not self.cpus:
            return "no CPU set"
        try:
            return snapshot(self.cpus, self.pid, self.proc_root)
        except (OSError, KeyError, ValueError, IndexError) as exc:
            return f"/proc unreadable: {exc}"

    def begin(self, key: str) -> None:
        """Read the window's first edge."""
        self._open[key] = self._read()

    def end(self, key: str) -> dict[str, Any] | None:
        """Read the last edge and store the window's contention; None when not begun."""
        first = self._open.pop(key, None)
        if first is None:
            return None
        last = self._read()
        if isinstance(first, str) or isinstance(last, str):
            why = first if isinstance(first, str) else last
            result: dict[str, Any] = {"share": None, "error": str(why)}
        else:
            result = contention(first, last)
        result["cpus"] = format_cpulist(self.cpus)
        self.windows[key] = result
        return result


def contention_metrics(windows: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    """The windows' contention as metrics: ``cpu_contention_share`` and
    ``cpu_contention_s`` of the main window, ``<key>_cpu_contention_share`` of the others."""
    out: dict[str, float | None] = {}
    for key, w in windows.items():
        prefix = "" if key == "main" else f"{key}_"
        out[f"{prefix}cpu_contention_share"] = w.get("share")
        if key == "main":
            out["cpu_contention_s"] = w.get("others_s")
    return out
