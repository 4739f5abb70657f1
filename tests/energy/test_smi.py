"""nvidia-smi parsers and field fallback (gcbench.energy.smi), on the recorded H200 outputs."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from gcbench.energy import smi
from gcbench.errors import MeasurementError

SMI_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia-smi"


def read(name: str) -> str:
    return (SMI_DIR / name).read_text()


def test_every_nvidia_smi_fixture_is_covered_by_a_parser():
    assert sorted(p.name for p in SMI_DIR.iterdir()) == [
        "h200_loop_50ms_power_draw_vs_instant.txt", "h200_q_power_clock_performance.txt",
        "h200_query_csv.txt", "h200_query_csv_noheader_nounits.txt", "h200_smi_and_q_full.txt",
        "invalid_field_error.txt"]


def test_query_csv_with_header_and_units_parses_every_field_exactly():
    (row,) = smi.parse_query_csv(read("h200_query_csv.txt"))
    assert row == {
        "timestamp": datetime(2026, 11, 29, 22, 27, 4, 918000), "index": 0, "name": "NVIDIA H200",
        "uuid": "GPU-00000000-1111-2222-3333-444444444444", "driver_version": "580.159.04", "pstate": "P0",
        "power.draw": 122.51, "power.draw.average": 122.51, "power.draw.instant": 122.39,
        "power.limit": 700.0, "enforced.power.limit": 700.0, "power.default_limit": 700.0,
        "power.min_limit": 200.0, "power.max_limit": 700.0, "temperature.gpu": 35, "temperature.memory": 37,
        "clocks.current.sm": 1980, "clocks.current.memory": 3201, "clocks.max.sm": 1980,
        "utilization.gpu": 0, "utilization.memory": 0, "memory.used": 0, "memory.total": 143771,
        "fan.speed": None, "clocks_event_reasons.active": 1, "clocks_event_reasons.sw_power_cap": "Not Active",
        "clocks_event_reasons.hw_slowdown": "Not Active", "ecc.errors.corrected.volatile.total": 0}


def test_query_csv_without_header_and_units_gives_the_same_values():
    fields = [f for f, _ in smi.parse_header(read("h200_query_csv.txt").splitlines()[0])]
    (row,) = smi.parse_query_csv(read("h200_query_csv_noheader_nounits.txt"), fields)
    (with_units,) = smi.parse_query_csv(read("h200_query_csv.txt"))
    assert row["timestamp"] == datetime(2026, 11, 29, 22, 27, 4, 948000)
    assert row["fan.speed"] is None                      # [N/A] is missing, not 0
    diff = {k for k in row if row[k] != with_units[k]}
    assert diff == {"timestamp", "power.draw", "power.draw.average"}   # 122.52 vs 122.51, 30 ms later
    assert row["power.draw"] == 122.52


def test_50ms_loop_shows_average_lagging_instant_with_timestamps():
    rows = smi.parse_query_csv(read("h200_loop_50ms_power_draw_vs_instant.txt"))
    assert len(rows) == 216
    assert rows[0] == {"timestamp": datetime(2026, 11, 29, 22, 27, 4, 979000), "index": 0,
                       "power.draw": 122.52, "power.draw.instant": 122.39}
    gaps = [(b["timestamp"] - a["timestamp"]).total_seconds() for a, b in zip(rows, rows[1:])]
    assert min(gaps) >= 0.049 and max(gaps) <= 0.052
    drop = next(i for i, r in enumerate(rows) if r["power.draw.instant"] < 100)
    assert rows[drop]["power.draw"] == 120.0            # average still high when instant fell to 79 W
    settled = next(i for i, r in enumerate(rows) if r["power.draw"] < 80)
    assert 0.9 < (rows[settled]["timestamp"] - rows[drop]["timestamp"]).total_seconds() < 1.1


def test_invalid_field_error_names_the_field():
    assert smi.invalid_field(read("invalid_field_error.txt")) == "bogus.field"
    with pytest.raises(ValueError, match="bogus.field"):
        smi.parse_query_csv(read("invalid_field_error.txt"))


def test_q_output_parses_power_readings_clock_reasons_and_missing_values():
    tree = smi.parse_q(read("h200_q_power_clock_performance.txt"))
    assert tree["Driver Version"] == "580.159.04" and tree["Attached GPUs"] == "1"
    gpu = smi.q_gpus(tree)["00000000:00:06.0"]
    assert smi.q_power(gpu) == {"average_w": 123.24, "instant_w": 124.4, "limit_w": 700.0,
                                "requested_limit_w": 700.0, "default_limit_w": 700.0,
                                "min_limit_w": 200.0, "max_limit_w": 700.0}
    assert gpu["Clocks Event Reasons"]["HW Slowdown"] == "Not Active"
    assert gpu["Clocks Event Reasons"]["HW Thermal Slowdown"] == "Not Active"
    assert smi.quantity(gpu["Clocks Event Reasons Counters"]["SW Power Capping"]) == (3559642.0, "us")
    assert gpu["Power Samples"]["Max"] == "737.63 W" and gpu["Power Samples"]["Number of Samples"] == "119"
    assert gpu["GPU Memory Power Readings"]["Instantaneous Power Draw"] is None   # N/A
    assert gpu["SM Clock Samples"]["Duration"] is None                            # Not Found
    assert smi.quantity(gpu["Clocks"]["SM"]) == (1980.0, "MHz")


def test_full_output_table_and_q_parse():
    text = read("h200_smi_and_q_full.txt")
    table = smi.parse_table(text)
    assert table["driver_version"] == "580.159.04" and table["cuda_version"] == "13.0"
    assert table["gpus"] == [{"index": 0, "name": "NVIDIA H200", "persistence": "On", "bus_id": "00000000:00:06.0",
                              "fan": None, "temperature_c": 33.0, "pstate": "P0", "power_w": 86.0,
                              "power_cap_w": 700.0, "memory_used_mib": 0, "memory_total_mib": 143771,
                              "utilization_pct": 0.0, "compute_mode": "Default", "mig_mode": "Disabled"}]
    assert table["processes_found"] is False
    gpu = smi.q_gpus(smi.parse_q(text))["00000000:00:06.0"]
    assert gpu["GPU UUID"] == "GPU-00000000-1111-2222-3333-444444444444"
    assert gpu["MIG Mode"]["Current"] == "Disabled"
    assert gpu["PCI"]["GPU Link Info"]["PCIe Generation"]["Max"] == "5"
    assert smi.q_power(gpu)["instant_w"] == 79.24
    assert smi.quantity(gpu["Temperature"]["GPU Shutdown T.Limit Temp"]) == (-8.0, "C")
    assert gpu["Capabilities"]["EGM"] == "disabled"


class FakeSmi:
    """Answers queries like nvidia-smi on an H200 (values of h200_query_csv.txt)."""

    values = {"timestamp": "2026/11/29 22:27:04.948", "index": "0",
              "uuid": "GPU-00000000-1111-2222-3333-444444444444", "power.draw": "122.52",
              "power.draw.average": "122.52", "power.draw.instant": "122.39", "temperature.gpu": "35",
              "clocks.sm": "1980", "clocks_event_reasons.active": "0x0000000000000001"}

    def __init__(self, unknown=(), na=()):
        self.unknown, self.na, self.calls = set(unknown), set(na), []

    def __call__(self, argv):
        self.calls.append(argv)
        assert isinstance(argv, list)
        fields = argv[1].split("=", 1)[1].split(",")
        for f in fields:
            if f in self.unknown or f not in self.values:
                return 2, f'Field "{f}" is not a valid field to query.\n\n'
        return 0, ", ".join("[N/A]" if f in self.na else self.values[f] for f in fields) + "\n"


def test_na_instant_power_falls_back_to_power_draw_and_records_it():
    run = FakeSmi(na={"power.draw.instant"})
    roles = smi.probe_fields([0], run=run)
    assert roles["power_instant_w"] == "power.draw"
    assert roles["power_w"] == "power.draw.average"


def test_unknown_field_is_replaced_field_by_field_not_the_whole_query():
    run = FakeSmi(unknown={"power.draw.instant", "clocks.sm", "clocks_event_reasons.active"})
    run.values["clocks.current.sm"] = "1980"
    run.values["clocks_throttle_reasons.active"] = "0x0000000000000001"
    roles = smi.probe_fields([0], run=run)
    assert roles["power_instant_w"] == "power.draw"
    assert roles["sm_clock_mhz"] == "clocks.current.sm"
    assert roles["clocks_event_reasons"] == "clocks_throttle_reasons.active"
    assert roles["temperature_c"] == "temperature.gpu"


def test_driver_without_any_power_field_is_a_clear_error():
    run = FakeSmi(unknown={"power.draw", "power.draw.instant", "power.draw.average"})
    with pytest.raises(MeasurementError, match="power_instant_w"):
        smi.probe_fields([0], run=run)


def test_streamed_line_with_na_power_is_missing_not_zero():
    roles = {"timestamp": "timestamp", "index": "index", "power_instant_w": "power.draw.instant",
             "power_w": "power.draw"}
    cols = [(f, None) for f in dict.fromkeys(roles.values())]
    row = smi.row_to_sample(smi.parse_csv_line("2026/11/29 22:27:04.948, 0, [N/A], 122.52", cols), roles)
    assert row["power_instant_w"] is None and row["power_w"] == 122.52


def test_query_argv_is_a_list_so_values_never_reach_a_shell():
    argv = smi.query_argv(["power.draw"], [0, 1], interval_ms=50, nvidia_smi="/usr/bin/nvidia-smi")
    assert argv == ["/usr/bin/nvidia-smi", "--query-gpu=power.draw", "--format=csv,noheader,nounits",
                    "-i", "0,1", "-lms", "50"]
    with pytest.raises(ValueError):
        smi.query_argv(["power.draw"], ["0; rm -rf /"])  # indices must be integers
