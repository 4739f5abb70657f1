"""The report keeps preprocessor versions apart and says which one each group ran."""

from __future__ import annotations

import pandas as pd

from gcbench.report.analysis.preprocessors import preprocessor_rows, split_versions

V1, V2 = "a" * 64, "b" * 64


def _frame(rows):
    return pd.DataFrame(
        [
            {
                "variant": variant,
                "factors": dict(factors),
                "preprocessor": {"name": "c", "source_sha256": sha} if sha else None,
                "preprocessor_build": (
                    {
                        "binary_sha256": "f" * 64,
                        "toolchain": "cc 12",
                        "builder": "local",
                        "conformance": {"passed": True, "inputs": 7, "ids": 260363},
                    }
                    if sha
                    else None
                ),
            }
            for variant, factors, sha in rows
        ]
    )


def test_two_versions_of_one_variant_become_two_groups_and_one_version_keeps_its_label():
    df = _frame(
        [
            ("lm[path=external-c]", {"path": "external-c"}, V1),
            ("lm[path=external-c]", {"path": "external-c"}, V2),
            ("lm[path=external-c]", {"path": "external-c"}, V2),
            ("lm[path=torch]", {"path": "torch"}, None),
        ]
    )
    out = split_versions(df)
    assert list(out["variant"]) == [
        "lm[path=external-c@aaaaaaaa]",
        "lm[path=external-c@bbbbbbbb]",
        "lm[path=external-c@bbbbbbbb]",
        "lm[path=torch]",
    ]
    assert [f["path"] for f in out["factors"]] == [
        "external-c@aaaaaaaa",
        "external-c@bbbbbbbb",
        "external-c@bbbbbbbb",
        "torch",
    ]
    assert list(df["variant"]).count("lm[path=external-c]") == 3  # the input is not changed
    single = split_versions(_frame([("lm[path=external-c]", {"path": "external-c"}, V1)] * 2))
    assert list(single["variant"]) == ["lm[path=external-c]"] * 2


def test_a_preprocessor_fixed_in_settings_is_split_by_a_factor_of_its_own():
    out = split_versions(_frame([("lm", {}, V1), ("lm", {}, V2)]))
    assert list(out["variant"]) == ["lm [c@aaaaaaaa]", "lm [c@bbbbbbbb]"]
    assert [f["preprocessor"] for f in out["factors"]] == ["c@aaaaaaaa", "c@bbbbbbbb"]


def test_rows_name_the_version_build_and_conformance_of_each_group():
    out = split_versions(
        _frame(
            [("lm[path=external-c]", {"path": "external-c"}, V1), ("lm[path=external-c]", {"path": "external-c"}, V2)]
        )
    )
    rows = preprocessor_rows(out)
    assert [(r["variant"], r["source"], r["trials"]) for r in rows] == [
        ("lm[path=external-c@aaaaaaaa]", "a" * 12, 1),
        ("lm[path=external-c@bbbbbbbb]", "b" * 12, 1),
    ]
    assert rows[0]["binary"] == "f" * 12 and rows[0]["conformance"] == "260,363 ids identical on 7 inputs"
    assert preprocessor_rows(_frame([("lm[path=torch]", {"path": "torch"}, None)])) == []
