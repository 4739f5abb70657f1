"""nvidia-smi parsers and field fallback (gcbench.energy.smi), on the recorded H200 outputs."""

from __future__ import annotations

from datetime import datetime, timedelta
from itertools import pairwise
from pathlib import Path

import pytest

from gcbench.energy import smi
from gcbench.errors import MeasurementError

SMI_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia-smi"


def read(name: str) -> str:
    return (SMI_DIR / name).read_text()


def test_every_nvidia_smi_fixture_is_covered_by_a_parser():
    assert sorted(p.name for p in SMI_DIR.iterdir()) == [
        "csv_noheader_with_units.txt",
        "h200_loop_50ms_power_draw_vs_instant.txt",
        "h200_q_power_clock_performance.txt",
        "h200_query_csv.txt",
        "h200_query_csv_noheader_nounits.txt",
        "h200_smi_and_q_full.txt",
        "invalid_field_error.txt",
        "lost_gpu_line_rc0.txt",
        "role_field_deprecated_marker.csv",
    ]


def test_query_csv_with_header_and_units_parses_every_field_exactly():
    (row,) = smi.parse_query_csv(read("h200_query_csv.txt"))
    assert row == {
        "timestamp": datetime(2026, 11, 29, 22, 27, 4, 918000),
        "index": 0,
        "name": "NVIDIA H200",
        "uuid": "GPU-00000000-1111-2222-3333-444444444444",
        "driver_version": "580.159.04",
        "pstate": "P0",
        "power.draw": 122.51,
        "power.draw.average": 122.51,
        "power.draw.instant": 122.39,
        "power.limit": 700.0,
        "enforced.power.limit": 700.0,
        "power.default_limit": 700.0,
        "power.min_limit": 200.0,
        "power.max_limit": 700.0,
        "temperature.gpu": 35,
        "temperature.memory": 37,
        "clocks.current.sm": 1980,
        "clocks.current.memory": 3201,
        "clocks.max.sm": 1980,
        "utilization.gpu": 0,
        "utilization.memory": 0,
        "memory.used": 0,
        "memory.total": 143771,
        "fan.speed": None,
        "clocks_event_reasons.active": 1,
        "clocks_event_reasons.sw_power_cap": "Not Active",
        "clocks_event_reasons.hw_slowdown": "Not Active",
        "ecc.errors.corrected.volatile.total": 0,
    }


def test_query_csv_without_header_and_units_gives_the_same_values():
    fields = [f for f, _ in smi.parse_header(read("h200_query_csv.txt").splitlines()[0])]
    (row,) = smi.parse_query_csv(read("h200_query_csv_noheader_nounits.txt"), fields)
    (with_units,) = smi.parse_query_csv(read("h200_query_csv.txt"))
    assert row["timestamp"] == datetime(2026, 11, 29, 22, 27, 4, 948000)
    assert row["fan.speed"] is None  # [N/A] is missing, not 0
    diff = {k for k in row if row[k] != with_units[k]}
    assert diff == {"timestamp", "power.draw", "power.draw.average"}  # 122.52 vs 122.51, 30 ms later
    assert row["power.draw"] == 122.52


def test_50ms_loop_shows_average_lagging_instant_with_timestamps():
    rows = smi.parse_query_csv(read("h200_loop_50ms_power_draw_vs_instant.txt"))
    assert len(rows) == 216
    assert rows[0] == {
        "timestamp": datetime(2026, 11, 29, 22, 27, 4, 979000),
        "index": 0,
        "power.draw": 122.52,
        "power.draw.instant": 122.39,
    }
    gaps = [(b["timestamp"] - a["timestamp"]).total_seconds() for a, b in pairwise(rows)]
    assert min(gaps) >= 0.049 and max(gaps) <= 0.052
    drop = next(i for i, r in enumerate(rows) if r["power.draw.instant"] < 100)
    assert rows[drop]["power.draw"] == 120.0  # average still high when instant fell to 79 W
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
    assert smi.q_power(gpu) == {
        "average_w": 123.24,
        "instant_w": 124.4,
        "limit_w": 700.0,
        "requested_limit_w": 700.0,
        "default_limit_w": 700.0,
        "min_limit_w": 200.0,
        "max_limit_w": 700.0,
    }
    assert gpu["Clocks Event Reasons"]["HW Slowdown"] == "Not Active"
    assert gpu["Clocks Event Reasons"]["HW Thermal Slowdown"] == "Not Active"
    assert smi.quantity(gpu["Clocks Event Reasons Counters"]["SW Power Capping"]) == (3559642.0, "us")
    assert gpu["Power Samples"]["Max"] == "737.63 W" and gpu["Power Samples"]["Number of Samples"] == "119"
    assert gpu["GPU Memory Power Readings"]["Instantaneous Power Draw"] is None  # N/A
    assert gpu["SM Clock Samples"]["Duration"] is None  # Not Found
    assert smi.quantity(gpu["Clocks"]["SM"]) == (1980.0, "MHz")


def test_full_output_table_and_q_parse():
    text = read("h200_smi_and_q_full.txt")
    table = smi.parse_table(text)
    assert table["driver_version"] == "580.159.04" and table["cuda_version"] == "13.0"
    assert table["gpus"] == [
        {
            "index": 0,
            "name": "NVIDIA H200",
            "persistence": "On",
            "bus_id": "00000000:00:06.0",
            "fan": None,
            "temperature_c": 33.0,
            "pstate": "P0",
            "power_w": 86.0,
            "power_cap_w": 700.0,
            "memory_used_mib": 0,
            "memory_total_mib": 143771,
            "utilization_pct": 0.0,
            "compute_mode": "Default",
            "mig_mode": "Disabled",
        }
    ]
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

    values = {
        "timestamp": "2026/11/29 22:27:04.948",
        "index": "0",
        "uuid": "GPU-00000000-1111-2222-3333-444444444444",
        "power.draw": "122.52",
        "power.draw.average": "122.52",
        "power.draw.instant": "122.39",
        "temperature.gpu": "35",
        "clocks.sm": "1980",
        "clocks_event_reasons.active": "0x0000000000000001",
    }

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


def test_na_instant_power_is_left_out_never_filled_with_the_averaged_power_draw_c16():
    run = FakeSmi(na={"power.draw.instant"})
    roles = smi.probe_fields([0], run=run)
    assert "power_instant_w" not in roles
    assert roles["power_w"] == "power.draw.average"


def test_driver_before_530_reads_power_draw_as_the_average_role_c16():
    run = FakeSmi(unknown={"power.draw.instant", "power.draw.average"})
    roles = smi.probe_fields([0], run=run)
    assert "power_instant_w" not in roles and roles["power_w"] == "power.draw"


def test_unknown_field_is_replaced_field_by_field_not_the_whole_query():
    run = FakeSmi(unknown={"power.draw.instant", "clocks.sm", "clocks_event_reasons.active"})
    run.values["clocks.current.sm"] = "1980"
    run.values["clocks_throttle_reasons.active"] = "0x0000000000000001"
    roles = smi.probe_fields([0], run=run)
    assert "power_instant_w" not in roles and roles["power_w"] == "power.draw.average"
    assert roles["sm_clock_mhz"] == "clocks.current.sm"
    assert roles["clocks_event_reasons"] == "clocks_throttle_reasons.active"
    assert roles["temperature_c"] == "temperature.gpu"


def test_driver_without_any_power_field_is_a_clear_error():
    run = FakeSmi(unknown={"power.draw", "power.draw.instant", "power.draw.average"})
    with pytest.raises(MeasurementError, match="no supported field for power"):
        smi.probe_fields([0], run=run)


def test_streamed_line_with_na_power_is_missing_not_zero():
    roles = {
        "timestamp": "timestamp",
        "index": "index",
        "power_instant_w": "power.draw.instant",
        "power_w": "power.draw",
    }
    cols = [(f, None) for f in dict.fromkeys(roles.values())]
    row = smi.row_to_sample(smi.parse_csv_line("2026/11/29 22:27:04.948, 0, [N/A], 122.52", cols), roles)
    assert row["power_instant_w"] is None and row["power_w"] == 122.52


def test_query_argv_is_a_list_so_values_never_reach_a_shell():
    argv = smi.query_argv(["power.draw"], [0, 1], interval_ms=50, nvidia_smi="/usr/bin/nvidia-smi")
    assert argv == [
        "/usr/bin/nvidia-smi",
        "--query-gpu=power.draw",
        "--format=csv,noheader,nounits",
        "-i",
        "0,1",
        "-lms",
        "50",
    ]
    with pytest.raises(ValueError):
        smi.query_argv(["power.draw"], ["0; rm -rf /"])  # indices must be integers


# ----------------------------------------------------------------------------- markers, units, error lines (C08-C10)


def test_any_bracketed_marker_is_missing_c08():
    (row,) = smi.parse_query_csv(read("role_field_deprecated_marker.csv"))
    assert row == {"timestamp": datetime(2026, 7, 3, 22, 11, 9, 763000), "index": 0, "power.draw.instant": None}
    for marker in (
        "[Requested functionality has been deprecated]",
        "[Not Supported]",
        "[Some Future Marker]",
        " [N/A] ",
    ):
        assert smi.parse_value(marker, "power.draw.instant", "W") is None


def test_role_whose_field_prints_only_a_marker_falls_back_to_its_next_field_c08():
    run = FakeSmi()
    run.values["power.draw.instant"] = "[Requested functionality has been deprecated]"
    run.values["clocks.sm"] = "[Some Future Marker]"
    run.values["clocks.current.sm"] = "1980"
    roles = smi.probe_fields([0], run=run)
    assert "power_instant_w" not in roles and roles["sm_clock_mhz"] == "clocks.current.sm"


def test_marker_in_a_streamed_numeric_role_is_unknown_never_text_c08():
    roles = {
        "timestamp": "timestamp",
        "index": "index",
        "power_instant_w": "power.draw.instant",
        "temperature_c": "temperature.gpu",
    }
    stream = smi.SmiStream(roles)
    (sample,), events = stream.feed(
        b"2026/07/03 22:11:09.763, 0, [Requested functionality has been deprecated], Not Active\n", read_t_s=1.0
    )
    assert sample == (1.0, {"index": 0, "power_instant_w": None, "temperature_c": None}) and events == []


def test_noheader_output_with_units_gives_numbers_c09():
    fields = ["timestamp", "index", "power.draw", "temperature.gpu", "memory.used", "utilization.gpu"]
    (row,) = smi.parse_query_csv(read("csv_noheader_with_units.txt"), fields)
    assert row == {
        "timestamp": datetime(2026, 7, 14, 8, 12, 53, 353000),
        "index": 0,
        "power.draw": 631.95,
        "temperature.gpu": 59,
        "memory.used": 19818,
        "utilization.gpu": 100,
    }


@pytest.mark.parametrize("unit", smi.UNITS)
def test_every_unit_suffix_is_stripped_with_or_without_a_header(unit):
    assert smi.parse_value(f"631.95 {unit}", "x") == 631.95
    assert smi.parse_value(f"42 {unit}", "x", unit) == 42
    assert smi.parse_value(f"42{unit}", "x") == 42


def test_text_that_only_looks_like_units_stays_text():
    assert smi.parse_value("NVIDIA H200", "name") == "NVIDIA H200"
    assert smi.parse_value("P0", "pstate") == "P0"
    assert smi.parse_value("Not Active", "x") == "Not Active"


LOST_FIELDS = [
    "timestamp",
    "index",
    "uuid",
    "power.draw.instant",
    "power.draw.average",
    "temperature.gpu",
    "clocks.sm",
    "clocks_event_reasons.active",
]


def test_error_line_after_a_good_row_names_the_gpu_and_keeps_the_row_c10():
    with pytest.raises(MeasurementError) as err:
        smi.parse_query_csv(read("lost_gpu_line_rc0.txt"), LOST_FIELDS)
    assert err.value.device == "GPU 0000:11:00.0" and str(err.value).startswith("GPU 0000:11:00.0: ")
    assert "Unable to determine the device handle" in str(err.value)
    assert isinstance(err.value, smi.SmiOutputError)
    assert err.value.rows == [
        {
            "timestamp": datetime(2024, 3, 15, 13, 57, 59, 791000),
            "index": 0,
            "uuid": "GPU-x",
            "power.draw.instant": 70.68,
            "power.draw.average": 70.89,
            "temperature.gpu": 26,
            "clocks.sm": 345,
            "clocks_event_reasons.active": 1,
        }
    ]


def test_probe_with_an_error_line_and_exit_status_0_is_a_measurement_error_naming_the_gpu_c10():
    def run(argv):
        fields = argv[1].split("=", 1)[1].split(",")
        values = FakeSmi.values
        return 0, ", ".join(values[f] for f in fields) + "\n" + read("lost_gpu_line_rc0.txt").splitlines()[1] + "\n"

    with pytest.raises(MeasurementError, match=r"^GPU 0000:11:00\.0: "):
        smi.probe_fields([0, 1], run=run)


def test_error_line_of_a_one_field_query_is_not_taken_for_a_value():
    with pytest.raises(smi.SmiOutputError) as err:
        smi.parse_query_csv("35\nUnable to determine the device handle for GPU 1: GPU is lost\n", ["temperature.gpu"])
    assert err.value.device == "GPU 1" and err.value.rows == [{"temperature.gpu": 35}]


def test_list_gpus_keeps_the_gpus_listed_before_a_lost_one():
    def run(argv):
        return 0, (
            "0, NVIDIA H200, GPU-a, 00000000:06:00.0\n"
            "Unable to determine the device handle for GPU 0000:11:00.0: Unknown Error\n"
        )

    assert smi.list_gpus(run=run) == [
        {"index": 0, "name": "NVIDIA H200", "uuid": "GPU-a", "pci_bus_id": "00000000:06:00.0"}
    ]


def test_streamed_error_line_is_an_event_naming_the_gpu_and_good_rows_are_kept_c10():
    roles = dict(
        zip(
            [
                "timestamp",
                "index",
                "uuid",
                "power_instant_w",
                "power_w",
                "temperature_c",
                "sm_clock_mhz",
                "clocks_event_reasons",
            ],
            LOST_FIELDS,
            strict=True,
        )
    )
    stream = smi.SmiStream(roles)
    samples, events = stream.feed(read("lost_gpu_line_rc0.txt").encode(), read_t_s=2.5)
    assert samples == [
        (
            2.5,
            {
                "index": 0,
                "uuid": "GPU-x",
                "power_instant_w": 70.68,
                "power_w": 70.89,
                "temperature_c": 26,
                "sm_clock_mhz": 345,
                "clocks_event_reasons": 1,
            },
        )
    ]
    assert events == [
        {
            "event": "nvidia_smi_error",
            "device": "GPU 0000:11:00.0",
            "t_s": 2.5,
            "line": "Unable to determine the device handle for GPU 0000:11:00.0: Unknown Error",
        }
    ]


# ----------------------------------------------------------------------------- t_s on the monotonic clock

STREAM_ROLES = {"timestamp": "timestamp", "index": "index", "power_instant_w": "power.draw.instant"}


def smi_line(printed: datetime, watts: float) -> bytes:
    return f"{printed.strftime('%Y/%m/%d %H:%M:%S.%f')[:-3]}, 0, {watts:.2f}\n".encode()


def test_clock_step_of_minus_2_s_moves_no_sample():
    """An NTP correction of -2 s mid-stream: the printed time jumps back, the samples do not."""
    stream = smi.SmiStream(STREAM_ROLES, start_t_s=0.0)
    wall = datetime(2026, 3, 29, 1, 59, 59)
    out, events = [], []
    for i in range(40):  # one line per read, every 50 ms
        printed = wall + timedelta(seconds=0.05 * i) - (timedelta(seconds=2) if i >= 20 else timedelta(0))
        s, e = stream.feed(smi_line(printed, 100.0 + i), read_t_s=0.1 + 0.05 * i)
        out += s
        events += e
    t = [x[0] for x in out]
    assert len(out) == 40 and [x[1]["power_instant_w"] for x in out] == [100.0 + i for i in range(40)]
    gaps = [b - a for a, b in pairwise(t)]
    assert min(gaps) == pytest.approx(0.05) and max(gaps) == pytest.approx(0.05)  # ordered, no gap
    assert events == [{"event": "nvidia_smi_clock_step", "t_s": pytest.approx(0.1 + 0.05 * 20), "step_s": -2.0}]


def test_rows_in_one_read_keep_their_printed_spacing_anchored_on_the_least_delayed_read():
    stream = smi.SmiStream(STREAM_ROLES, start_t_s=0.0)
    wall = datetime(2026, 10, 25, 2, 59, 59, 900000)
    (first,), _ = stream.feed(smi_line(wall, 1), read_t_s=1.0)
    # three rows in one read, 50 ms apart as printed: 50, 100, 150 ms after the first row
    chunk = b"".join(smi_line(wall + timedelta(seconds=0.05 * k), 2 + k) for k in (1, 2, 3))
    samples, events = stream.feed(chunk, read_t_s=1.2)
    assert first[0] == 1.0 and events == []
    assert [round(t, 3) for t, _ in samples] == [1.05, 1.1, 1.15]


def test_a_buffered_pipe_delivering_40_rows_at_once_gives_40_distinct_times_item10():
    """nvidia-smi's stdout to a pipe is block-buffered: 2 s of rows arrive in one read."""
    stream = smi.SmiStream(STREAM_ROLES, start_t_s=0.0)
    wall = datetime(2026, 1, 1, 12, 0, 0)
    out = []
    for chunk_k in range(3):  # rows every 50 ms, delivered every 2 s (the last row 10 ms before its read)
        rows = range(40 * chunk_k, 40 * (chunk_k + 1))
        chunk = b"".join(smi_line(wall + timedelta(seconds=0.05 * i), float(i)) for i in rows)
        out += stream.feed(chunk, read_t_s=0.3 + 0.05 * rows[-1] + 0.01)[0]
    t = [x[0] for x in out]
    assert len(t) == 120
    gaps = [b - a for a, b in pairwise(t)]
    assert min(gaps) == pytest.approx(0.05) and max(gaps) == pytest.approx(0.05)
    assert t[0] == pytest.approx(0.31)  # anchored on the first read: row 0 printed 0 s before it


def test_a_slow_reader_never_gives_zero_length_intervals_between_reads_item10():
    """A read 300 ms late, then one on time: the late read does not push its rows (nor the next) later."""
    stream = smi.SmiStream(STREAM_ROLES, start_t_s=0.0)
    wall = datetime(2026, 1, 1, 12, 0, 0)
    stream.feed(smi_line(wall, 0), read_t_s=0.5)
    late = b"".join(smi_line(wall + timedelta(seconds=0.1 * k), k) for k in (1, 2, 3))
    a, _ = stream.feed(late, read_t_s=0.5 + 0.3 + 0.3)  # printed up to 0.3 s, read 0.3 s late
    b, _ = stream.feed(smi_line(wall + timedelta(seconds=0.4), 4), read_t_s=0.9)
    t = [x[0] for x in a + b]
    assert t == pytest.approx([0.6, 0.7, 0.8, 0.9])


def test_a_clock_step_inside_one_read_is_refused_and_reanchored_keeping_order_item10():
    stream = smi.SmiStream(STREAM_ROLES, start_t_s=0.0)
    wall = datetime(2026, 10, 25, 2, 59, 59, 900000)
    stream.feed(smi_line(wall, 1), read_t_s=1.0)
    # a step of -2 s inside one read: the printed difference (-1.95 s) is refused
    chunk = smi_line(wall + timedelta(seconds=0.2), 5) + smi_line(wall - timedelta(seconds=1.75), 6)
    samples, events = stream.feed(chunk, read_t_s=1.3)
    assert [round(t, 3) for t, _ in samples] == [1.2, 1.3]
    assert events == [{"event": "nvidia_smi_clock_step", "t_s": pytest.approx(1.3), "step_s": -2.05}]
    # a step of +1 h (daylight saving): refused too, the row placed at its read, after the previous one
    samples, events = stream.feed(smi_line(wall + timedelta(hours=1, seconds=-1.7), 7), read_t_s=1.35)
    assert [round(t, 3) for t, _ in samples] == [1.35]
    assert events[0]["event"] == "nvidia_smi_clock_step" and events[0]["step_s"] == pytest.approx(3600.0, abs=0.1)


def test_repeated_header_and_blank_lines_mid_stream_are_skipped_item9():
    stream = smi.SmiStream(STREAM_ROLES, start_t_s=0.0)
    wall = datetime(2026, 1, 1, 12, 0, 0)
    chunk = (
        smi_line(wall, 1.0)
        + b"\n"
        + b"timestamp, index, power.draw.instant [W]\n"
        + b"   \n"
        + smi_line(wall + timedelta(seconds=0.05), 2.0)
    )
    samples, events = stream.feed(chunk, read_t_s=1.0)
    assert [r["power_instant_w"] for _, r in samples] == [1.0, 2.0] and events == []


def test_header_and_blank_lines_among_query_rows_are_skipped_but_an_error_line_still_names_its_gpu_item9():
    fields = ["index", "power.draw.instant"]
    text = "index, power.draw.instant [W]\n0, 100.5\n\nindex, power.draw.instant [W]\n1, 200.25\n"
    assert smi.parse_query_csv(text) == [
        {"index": 0, "power.draw.instant": 100.5},
        {"index": 1, "power.draw.instant": 200.25},
    ]
    assert smi.parse_query_csv("0, 100.5\nindex, power.draw.instant\n\n1, 200.25\n", fields) == [
        {"index": 0, "power.draw.instant": 100.5},
        {"index": 1, "power.draw.instant": 200.25},
    ]
    with pytest.raises(smi.SmiOutputError) as err:
        smi.parse_query_csv(
            "0, 100.5\nindex, power.draw.instant\nUnable to determine the device handle for GPU 1: GPU is lost\n",
            fields,
        )
    assert err.value.device == "GPU 1" and err.value.rows == [{"index": 0, "power.draw.instant": 100.5}]


def test_rows_of_several_gpus_printed_together_share_their_read_time():
    stream = smi.SmiStream(STREAM_ROLES, start_t_s=0.0)
    wall = datetime(2026, 1, 1, 12, 0, 0)
    samples, _ = stream.feed(smi_line(wall, 1) + smi_line(wall, 2).replace(b", 0, ", b", 1, "), read_t_s=0.5)
    assert [(t, r["index"]) for t, r in samples] == [(0.5, 0), (0.5, 1)]


def test_a_line_split_across_reads_is_timed_when_it_is_complete():
    stream = smi.SmiStream(STREAM_ROLES, start_t_s=0.0)
    line = smi_line(datetime(2026, 1, 1, 12, 0, 0), 123.45)
    assert stream.feed(line[:10], read_t_s=0.2) == ([], [])
    (sample,), _ = stream.feed(line[10:], read_t_s=0.25)
    assert sample == (0.25, {"index": 0, "power_instant_w": 123.45})


class OldDriverSmi(FakeSmi):
    """A driver before 530 (no power.draw.instant, no power.draw.average) on GPUs of these
    compute capabilities (None: a driver too old for the compute_cap field)."""

    def __init__(self, caps):
        super().__init__(unknown={"power.draw.instant", "power.draw.average"})
        self.caps = caps

    def __call__(self, argv):
        if argv[1] == "--query-gpu=compute_cap":
            if self.caps is None:
                return 2, 'Field "compute_cap" is not a valid field to query.\n\n'
            self.calls.append(argv)
            return 0, "".join(f"{c}\n" for c in self.caps)
        return super().__call__(argv)


@pytest.mark.parametrize(
    ("caps", "role", "note"),
    [
        (["7.0"], "power_instant_w", "compute capability 7 (before Ampere): power.draw is instant"),  # V100
        (["7.5", "7.5"], "power_instant_w", "compute capability 7.5, 7.5 (before Ampere): power.draw is instant"),
        (["8.0"], "power_w", "compute capability 8: power.draw is the 1-s average"),  # A100: the case
        (["9.0"], "power_w", "compute capability 9: power.draw is the 1-s average"),  # H100
        (None, "power_w", "compute capability unknown: power.draw taken as the 1-s average (Ampere and newer)"),
        (["7.5", "8.6"], "power_w", "compute capabilities 7.5, 8.6: power.draw is instant on some GPUs"),
    ],
)
def test_power_draw_of_a_driver_before_530_is_instant_before_ampere_c16(caps, role, note):
    # nvidia-smi --help-query-gpu: power.draw is the 1-s average on Ampere and newer, the
    # instant power on older GPUs; shifted by the average's 0.57 s lag, a Volta/Turing
    # window would lose 0.57 s of a power step (a 1-s burst: about -45 %)
    indices = [0] if caps is None else list(range(len(caps)))
    run = OldDriverSmi(caps)
    roles, said = smi.power_draw_roles(smi.probe_fields(indices, run=run), indices, run=run)
    assert {r: f for r, f in roles.items() if r in smi.POWER_ROLES} == {role: "power.draw"}
    assert said.startswith(note)
    sample = smi.row_to_sample({"power.draw": 250.0, "timestamp": "x", "index": 0}, roles)
    assert sample[role] == 250.0 and sample.get(({*smi.POWER_ROLES} - {role}).pop()) is None


def test_power_draw_roles_leave_a_driver_with_the_average_and_instant_fields_alone_c16():
    run = FakeSmi()
    roles = smi.probe_fields([0], run=run)
    calls = len(run.calls)
    assert smi.power_draw_roles(roles, [0], run=run) == (roles, None)
    assert len(run.calls) == calls  # no compute_cap query
