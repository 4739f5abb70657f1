"""Regenerate plugins/gcbench/data/carbon_intensity_places.csv from CodeCarbon's offline tables.

Usage: python scripts/update_carbon_places.py CODECARBON_WHEEL_OR_PACKAGE_DIR

CodeCarbon (MIT licence, https://github.com/mlco2/codecarbon) ships, per country, the
electricity carbon intensity with its year (``data/private_infra/global_energy_mix.json``,
``carbon_intensity`` in gCO2e/kWh) and, per cloud region, the intensity with its source
(``data/cloud/impact.csv``, ``impact`` in gCO2e/kWh). Both are *average* (location-based)
intensities. The extract keeps one row per place: ``place`` (ISO 3166-1 alpha-3 country
code, or ``<provider>:<region>``), its name, kgCO2e/kWh, the year (empty where the table
gives none), the table it came from and that table's source.
"""

from __future__ import annotations

import csv
import io
import json
import sys
import zipfile
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "plugins" / "gcbench" / "data" / "carbon_intensity_places.csv"


def _reader(src: Path):
    if src.suffix == ".whl":
        z = zipfile.ZipFile(src)
        version = src.name.split("-")[1]
        return (lambda name: z.read(f"codecarbon/{name}").decode("utf-8-sig")), version
    root = src / "codecarbon" if (src / "codecarbon").is_dir() else src
    version = next((p.name.split("-")[1] for p in root.parent.glob("codecarbon-*.dist-info")), "unknown")
    return (lambda name: (root / name).read_text(encoding="utf-8-sig")), version


def main(src: Path) -> int:
    read, version = _reader(src)
    rows = []
    mix = json.loads(read("data/private_infra/global_energy_mix.json"))
    table = f"CodeCarbon {version} global_energy_mix.json"
    for iso, d in sorted(mix.items()):
        if d.get("carbon_intensity") is None:
            continue
        rows.append(
            [
                iso,
                d.get("country_name", ""),
                d["carbon_intensity"] / 1000.0,
                d.get("year") or "",
                table,
                "Our World in Data energy data, as compiled by CodeCarbon",
            ]
        )
    table = f"CodeCarbon {version} cloud/impact.csv"
    for r in csv.DictReader(io.StringIO(read("data/cloud/impact.csv"))):
        name = ", ".join(x for x in (r.get("city"), r.get("country_name")) if x)
        rows.append(
            [f"{r['provider']}:{r['region']}", name, float(r["impact"]) / 1000.0, "", table, r.get("source", "")]
        )
    with OUT.open("w", encoding="utf-8", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["place", "name", "kg_per_kwh", "year", "table", "source"])
        for row in rows:
            row[2] = f"{row[2]:.6g}"
            w.writerow(row)
    print(f"{OUT}: {len(rows)} places")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
