"""Which preprocessor version each group ran, and keeping versions apart.

A trial fed by a declared preprocessor (:mod:`gcbench.tokenizer.preprocessors`) stores
the version it ran in its spec (``preprocessor.source_sha256``) and the build that ran
it in its result (``preprocessor``: binary SHA-256, toolchain, builder, conformance).
Trials of one variant label but two source versions are two programs: they must never
be pooled as one group. :func:`split_versions` gives each version of such a variant its
own label (``path=external-c@3f2a1b0c``) and factor level before groups are formed;
:func:`preprocessor_rows` lists, per group, the version and build it ran.

Pure functions over the trials frame (columns ``preprocessor`` and
``preprocessor_build``: dicts or None; absent columns mean no preprocessor).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

VERSION_CHARS = 8
"""Hex digits of the source SHA-256 shown in a split variant's label."""


def _entry(v: Any) -> dict[str, Any] | None:
    return v if isinstance(v, dict) and v.get("name") and v.get("source_sha256") else None


def split_versions(df: pd.DataFrame) -> pd.DataFrame:
    """A copy in which each source version of a variant run with more than one is its own
    variant: the factor that names the preprocessor (``path: external-c``) becomes
    ``external-c@<sha[:8]>`` in ``factors`` and in the label. Variants run with one
    version keep their label (their version is listed by :func:`preprocessor_rows`)."""
    if "preprocessor" not in df.columns or df.empty:
        return df
    out = df.copy()
    entries = [_entry(v) for v in out["preprocessor"]]
    versions: dict[str, set[str]] = {}
    for variant, e in zip(out["variant"], entries, strict=True):
        if e is not None:
            versions.setdefault(variant, set()).add(e["source_sha256"])
    split = {v for v, hashes in versions.items() if len(hashes) > 1}
    if not split:
        return out
    variants, factors = list(out["variant"]), list(out["factors"])
    for i, e in enumerate(entries):
        if e is None or variants[i] not in split:
            continue
        tag = "@" + e["source_sha256"][:VERSION_CHARS]
        f = dict(factors[i] or {})
        key = next((k for k, v in f.items() if isinstance(v, str) and v.endswith("-" + e["name"])), None)
        if key is not None:
            variants[i] = variants[i].replace(f"{key}={f[key]}", f"{key}={f[key]}{tag}", 1)
            f[key] = f"{f[key]}{tag}"
        else:
            f["preprocessor"] = e["name"] + tag
            variants[i] = f"{variants[i]} [{e['name']}{tag}]"
        factors[i] = f
    out["variant"] = variants
    out["factors"] = pd.Series(factors, index=out.index, dtype=object)
    return out


def preprocessor_rows(df: pd.DataFrame) -> list[dict[str, Any]]:
    """One row per (group, version): variant, name, source SHA-256 (12 digits), binary
    SHA-256 (12 digits, or "not recorded"), toolchain, builder, conformance (ids compared
    with the reference) and the number of trials. Empty when no trial used one."""
    if "preprocessor" not in df.columns:
        return []
    builds = df["preprocessor_build"] if "preprocessor_build" in df.columns else [None] * len(df)
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for variant, entry, build in zip(df["variant"], df["preprocessor"], builds, strict=True):
        e = _entry(entry)
        if e is None:
            continue
        b = build if isinstance(build, dict) else {}
        key = (variant, e["source_sha256"])
        if key not in rows:
            conformance = b.get("conformance") or {}
            rows[key] = {
                "variant": variant,
                "name": e["name"],
                "source": e["source_sha256"][:12],
                "binary": (b.get("binary_sha256") or "not recorded")[:12],
                "toolchain": b.get("toolchain") or "not recorded",
                "builder": b.get("builder") or ("tokenizer_bin setting" if b.get("tokenizer_bin") else "not recorded"),
                "conformance": (
                    f"{conformance['ids']:,} ids identical on {conformance['inputs']} inputs"
                    if conformance.get("passed")
                    else "not checked"
                ),
                "trials": 0,
            }
        rows[key]["trials"] += 1
    return sorted(rows.values(), key=lambda r: (r["variant"], r["source"]))
