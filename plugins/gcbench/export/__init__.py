"""Exports of stored results to the tools users already look at (MLflow).

Exporters read the results database (never a trial folder) and never fail a
measurement: an unreachable service is a warning, retried, and the run stays queued
for ``gcbench export mlflow --pending``.
"""
