"""The two studies' plans expand to the studies' configurations."""

from pathlib import Path

from gcbench.plan import expand, load_plan, variants

PLANS = Path(__file__).resolve().parents[2] / "plans"


def test_multigpu_co2e_has_twelve_configurations_per_repetition_on_two_gpus():
    plan = load_plan(PLANS / "multigpu-co2e.yaml")
    assert plan.devices == [0, 1]
    specs = expand(plan, repetitions=1)
    assert len(specs) == 12 == len(variants(plan))
    combos = {(s.settings["gpus"], s.settings["precision"], s.settings["power_cap_w"]) for s in specs}
    assert combos == {(g, p, c) for g in (1, 2) for p in ("fp32", "amp") for c in (300, 250, 200)}
    assert {tuple(s.devices) for s in specs if s.settings["gpus"] == 2} == {(0, 1)}
    assert {tuple(s.devices) for s in specs if s.settings["gpus"] == 1} == {(0,)}
    # fixed compute budget: same samples and global batch everywhere
    assert {(s.settings["train_samples"], s.settings["global_batch"]) for s in specs} == {(50000, 256)}
    assert plan.carbon.intensity_kg_per_kwh == 0.20 and plan.carbon.band == (0.10, 0.30)


def test_regime_covers_three_paths_both_modes_and_the_h2d_sweep():
    plan = load_plan(PLANS / "regime.yaml")
    specs = expand(plan, repetitions=1)
    tinylm = {(s.settings["path"], s.settings["mode"]) for s in specs if s.kind == "tinylm"}
    assert tinylm == {(p, m) for p in ("torch", "external-go", "external-rust") for m in ("train", "infer")}
    h2d = {(s.settings["memory"], s.settings["size_bytes"]) for s in specs if s.kind == "h2d"}
    assert {m for m, _ in h2d} == {"pinned", "pageable"}
    assert min(size for _, size in h2d) == 2**20 and max(size for _, size in h2d) == 2**30
    assert len(h2d) == 12


def test_smoke_covers_every_workload_kind():
    plan = load_plan(PLANS / "smoke.yaml")
    assert {s.kind for s in expand(plan)} == {"noop", "tinylm", "h2d", "resnet_cifar"}
