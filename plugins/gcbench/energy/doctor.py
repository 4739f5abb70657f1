"""``gcbench doctor``: what this machine can measure, and why not.

:func:`diagnose` returns a plain dict (``gcbench doctor --json``); :func:`format_text`
renders it. Each check has ``ok`` (bool) and ``why_not`` (None when ok). Nothing here
raises: a failing probe is a finding.
"""

from __future__ import annotations

import os

from gcbench.errors import MeasurementError


def _nvml(env: dict) -> tuple[dict, dict]:
    from gcbench.energy import nvml

    out: dict = {"ok": False, "why_not": None}
    gpus: dict = {
        "ok": False,
        "why_not": None,
        "visible": [],
        "cuda_visible_devices": env.get("CUDA_VISIBLE_DEVICES"),
        "cuda_device_order": env.get("CUDA_DEVICE_ORDER"),
        "mapping": [],
        "notes": [],
    }
    try:
        nv = nvml.load()
    except MeasurementError as exc:
        out["why_not"] = str(exc)
        gpus["why_not"] = "NVML unavailable"
        return out, gpus
    try:
        out.update(
            ok=True,
            driver=nvml._s(nv.nvmlSystemGetDriverVersion()),
            nvml_version=nvml._s(nv.nvmlSystemGetNVMLVersion()),
            device_count=nv.nvmlDeviceGetCount(),
        )
        for g in nvml._all_gpus(nv):
            item = {"index": g["index"], "name": g["name"], "uuid": g["uuid"], "pci_bus_id": g["pci_bus_id"]}
            try:
                item["mig_enabled"] = bool(nv.nvmlDeviceGetMigMode(g["handle"])[0])
            except nv.NVMLError:
                item["mig_enabled"] = False
            try:
                nv.nvmlDeviceGetTotalEnergyConsumption(g["handle"])
                item["energy_counter"] = True
            except nv.NVMLError as exc:
                item["energy_counter"] = False
                item["energy_counter_why_not"] = str(exc)
            gpus["visible"].append(item)
        if not gpus["visible"]:
            gpus["why_not"] = "NVML finds no GPU"
        else:
            try:
                mapped, notes = nvml.resolve_devices(
                    nv, [], env.get("CUDA_VISIBLE_DEVICES"), env.get("CUDA_DEVICE_ORDER")
                )
                gpus["mapping"] = [
                    {
                        "cuda_index": m.cuda_index,
                        "nvml_index": m.host_index,
                        "label": m.label,
                        "uuid": m.uuid,
                        "pci_bus_id": m.pci_bus_id,
                    }
                    for m in mapped
                ]
                gpus["notes"] = notes
                gpus["ok"] = True
            except MeasurementError as exc:
                gpus["why_not"] = str(exc)
    except nv.NVMLError as exc:
        out.update(ok=False, why_not=f"NVML query failed: {exc}")
    finally:
        try:
            nv.nvmlShutdown()
        except Exception:  # noqa: BLE001 - shutdown of a half-initialised library
            pass
    return out, gpus


def _nvidia_smi() -> dict:
    from gcbench.energy import smi

    path = smi.find_nvidia_smi()
    if not path:
        return {"ok": False, "path": None, "why_not": "nvidia-smi not found on PATH"}
    listed = smi.list_gpus(nvidia_smi=path)
    if not listed:
        return {"ok": False, "path": path, "why_not": "nvidia-smi lists no GPU (driver not loaded?)"}
    out = {"ok": True, "path": path, "why_not": None, "gpus": listed}
    try:
        out["fields"] = smi.probe_fields([listed[0]["index"]], nvidia_smi=path)
    except MeasurementError as exc:
        out.update(ok=False, why_not=str(exc))
    return out


def _rapl(root: str) -> dict:
    from gcbench.energy import rapl

    d = rapl.discover(root)
    ok = bool(d.domains) and d.reason is None
    return {
        "ok": ok,
        "root": root,
        "domains": [x.label for x in d.domains],
        "skipped": [f"{p}: {why}" for p, why in d.skipped],
        "permission": "denied" if d.reason and "permission denied" in d.reason else ("ok" if ok else None),
        "why_not": None if ok else (d.reason or "no countable RAPL domain"),
    }


def _docker() -> dict:
    try:
        import docker
    except ImportError as exc:
        return {"ok": False, "why_not": f"docker SDK not installed ({exc}); pip install docker"}
    try:
        client = docker.from_env(timeout=3)
        client.ping()
        version = client.version().get("Version")
        return {"ok": True, "why_not": None, "server_version": version}
    except Exception as exc:  # noqa: BLE001 - any SDK/transport failure means "not reachable"
        return {"ok": False, "why_not": f"Docker engine not reachable: {type(exc).__name__}: {exc}"[:300]}


def _node(settings, env: dict) -> dict:
    """The node meter (the BMC over IPMI or Redfish, :mod:`gcbench.energy.node`): probed
    when a plan's ``energy.node`` is given, else why there is none."""
    import shutil

    from gcbench.energy import node

    ipmitool = shutil.which("ipmitool")
    out: dict = {"ok": None, "why_not": None, "ipmitool": ipmitool}
    if settings is None:
        out["why_not"] = (
            "no node meter configured: a plan's energy.node names the BMC (ipmi: {host, user, password_env} "
            "or redfish: {url}); check it with gcbench doctor --plan PLAN"
            + ("" if ipmitool else "; ipmitool is not installed (scripts/system_deps.sh ipmi)")
        )
        return out
    _reader, probe = node.probe_settings(settings, env)
    out.update(probe.to_dict(), period_s=settings.period_s)
    return out


def _backends(env: dict) -> list[dict]:
    """Each registered backend in ``auto`` order: what it declares it reads, whether it
    finds a device here, and why not (:mod:`gcbench.energy.backend`)."""
    from gcbench.energy import backend

    out = []
    for e in backend.entries():
        item: dict = {"name": e.name, "kind": e.kind, "ok": False, "why_not": None}
        try:
            obj = backend.load(e.name)
        except (ImportError, AttributeError, MeasurementError) as exc:  # a broken registration is a finding
            item["why_not"] = f"cannot load {e.path}: {exc}"
            out.append(item)
            continue
        facts = obj if isinstance(obj, backend.Facts) else obj.facts
        item["reads"] = facts.describe()
        if e.kind != "gpu":
            why = {"cpu": "not probed here", "node": "a plan's energy.node chooses it: see the node meter above"}
            item.update(ok=None, why_not="see its own check above" if e.name == "rapl" else why[e.kind])
            out.append(item)
            continue
        impl = obj()
        try:
            opened = impl.open([], env)
            item.update(ok=True, devices=[g["label"] for g in opened.gpus])
            item["methods"] = sorted({_method(df) for df in opened.device_facts.values()})
        except MeasurementError as exc:
            item["why_not"] = str(exc)
        finally:
            impl.close()
        out.append(item)
    return out


def _method(df) -> str:
    f = df.facts
    if f.energy_counter:
        return f.method("counter-edge-corrected")
    return f.method("power-integration" if f.instant_power else "average-power-lag-corrected")


def diagnose(
    rapl_root: str = "/sys/class/powercap", env: dict | None = None, docker_check: bool = True, node_settings=None
) -> dict:
    """Probe NVML, nvidia-smi, RAPL, Docker, the GPU mapping and the node meter.

    Args:
        node_settings: a plan's ``energy.node`` (:class:`gcbench.spec.NodeSettings`) to
            probe; None: the node meter is reported as not configured, with why.

    Returns:
        {"nvml", "nvidia_smi", "rapl", "node", "docker", "gpus", "backend"}; ``backend``
        is what a Meter with ``backend: auto`` would use (``nvml``, ``nvidia-smi`` or
        ``simulated``).
    """
    env = dict(os.environ if env is None else env)
    nv, gpus = _nvml(env)
    sm = _nvidia_smi()
    backends = _backends(env)
    chosen = next((b for b in backends if b["kind"] == "gpu" and b["ok"]), None)
    backend = chosen["name"] if chosen else "none"
    passed = [str(b["why_not"]) for b in backends if b["kind"] == "gpu" and not b["ok"]]
    return {
        "backends": backends,
        "backend_why": "; ".join(passed[: [b["name"] for b in backends].index(backend)] if chosen else passed)
        or "the first backend in auto order found a device",
        "nvml": nv,
        "nvidia_smi": sm,
        "rapl": _rapl(rapl_root),
        "node": _node(node_settings, env),
        "docker": _docker() if docker_check else {"ok": None, "why_not": "not checked"},
        "gpus": gpus,
        "backend": backend,
    }


def format_text(d: dict) -> str:
    """Human-readable report of :func:`diagnose`'s dict, one line per check."""

    def mark(ok) -> str:
        return "ok " if ok else ("-- " if ok is None else "NO ")

    lines = []
    nv = d["nvml"]
    lines.append(
        f"{mark(nv['ok'])} NVML          "
        + (
            f"driver {nv.get('driver')}, NVML {nv.get('nvml_version')}, {nv.get('device_count')} GPU(s)"
            if nv["ok"]
            else nv["why_not"]
        )
    )
    sm = d["nvidia_smi"]
    lines.append(
        f"{mark(sm['ok'])} nvidia-smi    "
        + (
            f"{sm['path']}, power field {(sm.get('fields') or {}).get('power_instant_w')}"
            if sm["ok"]
            else sm["why_not"]
        )
    )
    ra = d["rapl"]
    lines.append(
        f"{mark(ra['ok'])} RAPL          "
        + (f"{', '.join(ra['domains'])} under {ra['root']}" if ra["ok"] else ra["why_not"])
    )
    nd = d.get("node")
    if nd is not None:
        lines.append(
            f"{mark(nd['ok'])} node (BMC)    "
            + (
                f"{nd['protocol']} {nd['how']}: {nd['power_w']:g} W now, read every {nd['period_s']:g} s"
                if nd["ok"]
                else nd["why_not"]
            )
        )
    dk = d["docker"]
    lines.append(
        f"{mark(dk['ok'])} Docker        " + (f"engine {dk.get('server_version')}" if dk["ok"] else dk["why_not"])
    )
    g = d["gpus"]
    cvd = g.get("cuda_visible_devices")
    lines.append(
        f"{mark(g['ok'])} GPUs          "
        + (
            f"{len(g['visible'])} visible, CUDA_VISIBLE_DEVICES={cvd if cvd is not None else '(unset)'}"
            if g["ok"]
            else g["why_not"]
        )
    )
    for item in g.get("visible", []):
        extra = "" if item.get("energy_counter") else " (no energy counter: power integration)"
        if item.get("mig_enabled"):
            extra += " (MIG enabled: cannot be measured)"
        lines.append(f"      nvml {item['index']}: {item['name']} {item['uuid']} {item['pci_bus_id']}{extra}")
    for m in g.get("mapping", []):
        lines.append(
            f"      cuda:{m['cuda_index']} -> nvml {m['nvml_index']} ({m['uuid']})"
            if m["cuda_index"] is not None
            else f"      {m['label']} ({m['uuid']})"
        )
    for n in g.get("notes", []):
        lines.append(f"      note: {n}")
    simulated = any(
        b["name"] == d["backend"] and "simulated" in (b.get("methods") or []) for b in d.get("backends", [])
    )
    lines.append("    backends (auto order):")
    for b in d.get("backends", []):
        state = "found " + ", ".join(b.get("devices") or []) if b["ok"] else (b["why_not"] or "")
        lines.append(f"      {mark(b['ok'])}{b['name']:<11} [{b['kind']}] {b.get('reads', '')}")
        lines.append(f"         {state}" + (f"; figures: {', '.join(b['methods'])}" if b.get("methods") else ""))
    lines.append(
        f"    backend: {d['backend']}"
        + ("  (numbers will be SIMULATED, not measured)" if simulated else "")
        + f"; why: {d.get('backend_why')}"
    )
    return "\n".join(lines)
