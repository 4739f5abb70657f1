"""Plans: schema, loading with file:line errors, and expansion into trial specs."""

from gcbench.plan.loader import load_plan, plan_from_text
from gcbench.plan.matrix import combinations, variant_label, variants
from gcbench.plan.schema import Plan, WorkloadEntry
from gcbench.plan.trials import expand

__all__ = [
    "Plan",
    "WorkloadEntry",
    "combinations",
    "expand",
    "load_plan",
    "plan_from_text",
    "variant_label",
    "variants",
]
