import pytest

from gcbench.spec import Amount
from gcbench.workloads import h2d

MIB = 1 << 20


def test_cpu_copy_is_reported_as_host_copy_not_gpu(context, make_spec):
    spec = make_spec("h2d", {"memory": "pinned", "size_bytes": 4 * MIB}, window=Amount(steps=8), warmup=Amount(steps=2))
    ctx = context(spec)
    out = h2d.run(spec, ctx)
    assert out["bytes"] == 8 * 4 * MIB
    assert out["copies"] == 8
    assert out["size_bytes"] == 4 * MIB
    assert out["device_kind"] == "cpu"
    assert out["copy_target"] == "host"
    assert out["memory"] == "pinned"
    assert out["memory_effective"] == "pageable"
    assert "no CUDA" in out["note"]
    assert out["pin_inside_window"] is False and out["pin_s"] is None
    assert ctx.order == ["main"]
    # the uniform record of what ran: pinned was asked for, pageable host memory was copied
    assert out["settings_effective"]["memory"] == "pageable"
    assert out["settings_not_in_effect"] == {
        "memory": "no CUDA device: pinned memory unavailable, host-to-host copy of pageable memory"
    }


def test_pageable_memory_is_in_effect_without_cuda(context, make_spec):
    spec = make_spec("h2d", {"memory": "pageable", "size_bytes": MIB}, window=Amount(steps=2))
    out = h2d.run(spec, context(spec))
    assert out["settings_not_in_effect"] == {}
    assert out["settings_effective"] == {"memory": "pageable", "size_bytes": MIB, "pin_inside_window": False}


def test_pageable_seconds_window_counts_whole_copies(context, make_spec):
    spec = make_spec(
        "h2d", {"memory": "pageable", "size_bytes": MIB, "pin_inside_window": True}, window=Amount(seconds=0.1)
    )
    ctx = context(spec)
    out = h2d.run(spec, ctx)
    assert out["copies"] >= 1
    assert out["bytes"] == out["copies"] * MIB
    assert out["pin_inside_window"] is True  # echoed as set, even where it has no effect
    assert out["settings_not_in_effect"] == {"pin_inside_window": "nothing was pinned (pageable memory)"}
    assert out["settings_effective"]["pin_inside_window"] is False
    assert ctx.duration() >= 0.1


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"size_bytes": MIB - 1}, "1 MiB..1 GiB"),
        ({"size_bytes": (1 << 30) + 1}, "1 MiB..1 GiB"),
        ({"memory": "unified"}, "pinned or pageable"),
    ],
)
def test_bad_settings_are_refused(context, make_spec, settings, message):
    spec = make_spec("h2d", settings)
    with pytest.raises(ValueError, match=message):
        h2d.run(spec, context(spec))
