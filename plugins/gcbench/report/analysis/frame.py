"""The trials frame: :class:`ReportData`'s trials normalized (lists, dicts, validity), with
CO2e and time per unit of work added. Pure functions over a pandas DataFrame."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pandas as pd

from gcbench.carbon import SCOPE_WORDS
from gcbench.metrics import METRIC_COLUMNS
from gcbench.report.analysis.settings import ReportSettings
from gcbench.report.data import TRIAL_COLUMNS
from gcbench.units import J_PER_KWH


def _as_list(v: Any) -> list[str]:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return []
    if isinstance(v, str):
        s = v.strip()
        if s.startswith("["):
            try:
                return [str(x) for x in json.loads(s)]
            except ValueError:
                pass
        return [p.strip() for p in s.split(";") if p.strip()]
    return [str(x) for x in v]


def _as_dict(v: Any) -> dict:
    if isinstance(v, dict):
        return v
    if isinstance(v, str) and v.strip().startswith("{"):
        try:
            return json.loads(v)
        except ValueError:
            return {}
    return {}


def _valid(v: Any) -> bool | None:
    if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA:
        return None
    return bool(v)


def _text(v: Any) -> str | None:
    if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA or v == "":
        return None
    return str(v)


def normalize_trials(trials: pd.DataFrame) -> pd.DataFrame:
    """A copy with every contract column present and typed.

    Missing metric columns become NaN, missing descriptive ones None; ``reasons`` and
    ``flags`` become lists, ``factors`` dicts, ``valid`` True/False/None, metrics float.
    """
    df = trials.copy()
    n = len(df)
    for col in TRIAL_COLUMNS:
        if col not in df.columns:
            df[col] = [None] * n
    for col in METRIC_COLUMNS:
        df[col] = pd.to_numeric(df[col], errors="coerce") if col in df.columns else np.nan
    df["reasons"] = [_as_list(v) for v in df["reasons"]]
    df["flags"] = [_as_list(v) for v in df["flags"]]
    df["factors"] = [_as_dict(v) for v in df["factors"]]
    df["settings_not_in_effect"] = pd.Series(
        [_recorded_dict(v) for v in df["settings_not_in_effect"]], index=df.index, dtype=object
    )
    df["valid"] = pd.Series([_valid(v) for v in df["valid"]], index=df.index, dtype=object)
    df["simulated"] = [bool(v) if _valid(v) is not None else False for v in df["simulated"]]
    df["status"] = [(_text(v) or "ok") for v in df["status"]]
    for col in ("error", "gpu_method", "gpu_source", "cpu_method"):
        df[col] = pd.Series([_text(v) for v in df[col]], index=df.index, dtype=object)
    df["variant"] = [str(v) for v in df["variant"]]
    df["workload"] = [_text(v) or "workload" for v in df["workload"]]
    df["kind"] = [_text(v) or "unknown" for v in df["kind"]]
    df["used"] = (df["status"] == "ok") & (df["valid"].map(lambda v: v is True))
    from gcbench.report.analysis.preprocessors import split_versions

    df = split_versions(df)
    df["not_in_effect"] = pd.Series(trial_not_in_effect(df), index=df.index, dtype=object)
    return df


def _recorded_dict(v: Any) -> dict | None:
    """A recorded ``{setting: reason}`` (dict or JSON text), or None when not recorded."""
    if isinstance(v, dict):
        return {str(k): str(x) for k, x in v.items()}
    if isinstance(v, str) and v.strip().startswith("{"):
        try:
            d = json.loads(v)
        except ValueError:
            return None
        return {str(k): str(x) for k, x in d.items()} if isinstance(d, dict) else None
    return None


def trial_not_in_effect(df: pd.DataFrame) -> list[dict[str, str]]:
    """Per trial, ``{setting: reason}`` of the requested settings that did not run as asked.

    The trial's recorded ``settings_not_in_effect`` when it has one. A trial stored
    before workloads recorded it is judged from what it reported then: a factor whose
    ``<factor>_effective`` value is another level of the same factor in its workload
    (``memory=pinned`` that ran as ``memory_effective=pageable``) did not run as asked;
    the reason is the trial's ``note`` when it gave one.
    """
    levels: dict[tuple[str, str], set[str]] = {}
    for w, factors in zip(df["workload"], df["factors"], strict=True):
        for k, v in factors.items():
            levels.setdefault((w, k), set()).add(str(v))
    out: list[dict[str, str]] = []
    for i in range(len(df)):
        row = df.iloc[i]
        recorded = row["settings_not_in_effect"]
        if recorded is not None:
            out.append(dict(recorded))
            continue
        legacy: dict[str, str] = {}
        for k, v in row["factors"].items():
            col = f"{k}_effective"
            ran = _text(row[col]) if col in df.columns else None
            if ran is not None and ran != str(v) and ran in levels.get((row["workload"], k), ()):
                note = _text(row["note"]) if "note" in df.columns else None
                legacy[k] = note or f"ran as {k}={ran}"
        out.append(legacy)
    return out


def add_carbon(df: pd.DataFrame, settings: ReportSettings) -> tuple[pd.DataFrame, str]:
    """Add ``co2_energy_kwh``, ``co2e_kg`` (recomputed at the plan's intensity),
    ``co2e_kg_low`` and ``co2e_kg_high`` (and, with the plan's ``carbon.pue``,
    ``facility_energy_kwh`` and ``facility_co2e_kg``: the same x PUE); return the energy
    basis in words: which scopes it adds up (:data:`gcbench.carbon.SCOPE_WORDS`).

    Energy basis, per trial: ``energy_kwh`` when known (the scope rule's total,
    :func:`gcbench.carbon.energy_total`: node if metered, else module, else GPU + CPU),
    else ``total_energy_j``, else ``gpu_energy_j`` + ``cpu_energy_j`` (CPU counted only
    where known), else unknown. A node-metered trial whose node energy is unknown stays
    unknown: its parts are never put in for the node.
    """
    gpu_cpu = df["gpu_energy_j"] + df["cpu_energy_j"].fillna(0.0)
    joules = df["total_energy_j"].where(df["total_energy_j"].notna(), gpu_cpu)
    scope = df["energy_scope"] if "energy_scope" in df.columns else pd.Series([None] * len(df), index=df.index)
    node = scope.astype(object).eq("node")
    joules = joules.where(~node, np.nan)
    kwh = df["energy_kwh"].where(df["energy_kwh"].notna(), joules / J_PER_KWH)
    df["co2_energy_kwh"] = kwh
    if settings.per_trial_carbon and "carbon_intensity_kg_per_kwh" in df.columns:
        # an hourly series: each trial at its own window's intensity and band, as collect stored them
        intensity = df["carbon_intensity_kg_per_kwh"]
        df["co2e_kg"] = kwh * intensity
        for col, key in (
            ("co2e_kg_low", "carbon_intensity_low_kg_per_kwh"),
            ("co2e_kg_high", "carbon_intensity_high_kg_per_kwh"),
        ):
            df[col] = kwh * pd.to_numeric(df[key], errors="coerce") if key in df.columns else np.nan
    else:
        df["co2e_kg"] = kwh * settings.intensity_kg_per_kwh
        df["co2e_kg_low"] = kwh * settings.band[0]
        df["co2e_kg_high"] = kwh * settings.band[1]
    if settings.pue is not None:  # facility overhead: explicit figures of their own
        df["facility_energy_kwh"] = kwh * settings.pue
        df["facility_co2e_kg"] = df["co2e_kg"] * settings.pue
    has_cpu = df["cpu_energy_j"].notna().any() or df["total_energy_j"].notna().any()
    basis = "GPU + CPU (RAPL) energy" if has_cpu else "GPU energy only (CPU energy unknown)"
    if node.any():
        basis = SCOPE_WORDS["node"] + ("" if node.all() else f"; {basis} in the trials without a node meter")
    elif scope.astype(object).eq("module").any():
        basis = SCOPE_WORDS["module"]
    return df, basis


def add_time_per_work(df: pd.DataFrame) -> pd.DataFrame:
    """Add ``s_per_token`` (duration_s / tokens) and ``s_per_gb`` (duration_s / GB): the
    time side of the energy-time trade-off for workloads measured over a fixed window,
    where energy per unit of work and time per unit of work are what trade."""
    tokens = df["tokens"].where(df["tokens"] > 0)
    gb = (df["bytes"] * 1e-9).where(df["bytes"] > 0)
    df["s_per_token"] = df["duration_s"] / tokens
    df["s_per_gb"] = df["duration_s"] / gb
    return df
