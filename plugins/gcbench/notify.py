"""Notifications of failed GC-Bench checks: an Airflow 3 notifier (``BaseNotifier``).

:class:`RegressionNotifier` is attached as ``on_failure_callback`` of the nightly
``regression_check`` task. When the task fails it

* always logs the message (level ERROR, logger ``gcbench.notify``);
* POSTs a JSON payload to ``GCBENCH_WEBHOOK_URL`` when that variable is set (any
  service accepting JSON: a chat incoming webhook, an alerting gateway);
* sends an e-mail to ``GCBENCH_NOTIFY_EMAIL`` (comma-separated addresses) when that
  is set, through Airflow's own e-mail backend (``[email]`` / ``[smtp]`` settings,
  e.g. ``AIRFLOW__SMTP__SMTP_HOST``).

The message is the :class:`gcbench.regression.RegressionError` the task raised (every
group's change, CI and p-value) or, when the task failed for another reason (the
database was down), that error: a check that could not run is worth a message too.

A failing channel is logged and does not stop the others; Airflow also logs any
exception of a notifier without failing anything else. Webhook payload::

    {"text": "<message>", "dag_id": ..., "run_id": ..., "logical_date": ...,
     "task_id": ..., "regressions": N or null, "groups": [...] or null}
"""

from __future__ import annotations

import json
import logging
import os
import urllib.request
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow.sdk import Context

from airflow.sdk import BaseNotifier

log = logging.getLogger(__name__)

WEBHOOK_ENV = "GCBENCH_WEBHOOK_URL"
EMAIL_ENV = "GCBENCH_NOTIFY_EMAIL"
WEBHOOK_TIMEOUT_S = 10.0
"""Seconds to wait for the webhook's answer."""


class RegressionNotifier(BaseNotifier):
    """Log, and POST to a webhook or e-mail when configured, a failed regression check.

    Args:
        webhook_url: overrides ``GCBENCH_WEBHOOK_URL`` (read at notification time).
        email_to: overrides ``GCBENCH_NOTIFY_EMAIL``.

    Example::

        @task(on_failure_callback=RegressionNotifier())
        def regression_check(): ...
    """

    template_fields = ()

    def __init__(self, webhook_url: str | None = None, email_to: str | None = None):
        super().__init__()
        self.webhook_url = webhook_url
        self.email_to = email_to
        self.sent: list[str] = []
        """Channels that delivered the last notification (``log``, ``webhook``, ``email``)."""

    @staticmethod
    def payload(context: Mapping[str, Any]) -> dict[str, Any]:
        """The notification's content from an Airflow callback context."""
        from gcbench.regression import RegressionError

        exc = context.get("exception")
        ti = context.get("ti") or context.get("task_instance")
        dag_run = context.get("dag_run")
        logical = context.get("logical_date") or getattr(dag_run, "logical_date", None)
        out: dict[str, Any] = {
            "dag_id": getattr(ti, "dag_id", None) or getattr(context.get("dag"), "dag_id", None),
            "run_id": context.get("run_id") or getattr(dag_run, "run_id", None),
            "logical_date": logical.isoformat() if logical is not None and hasattr(logical, "isoformat") else logical,
            "task_id": getattr(ti, "task_id", None),
            "regressions": None,
            "groups": None,
        }
        if isinstance(exc, RegressionError):
            result = exc.result.to_dict()
            out["regressions"], out["groups"] = result["regressions"], result["groups"]
            out["text"] = f"GC-Bench energy regression: {exc}"
        elif exc is not None:
            out["text"] = (
                f"GC-Bench: {out['task_id']} of {out['dag_id']} {out['run_id']} failed: {type(exc).__name__}: {exc}"
            )
        else:
            out["text"] = f"GC-Bench: {out['task_id']} of {out['dag_id']} {out['run_id']} failed"
        return out

    def notify(self, context: Context) -> None:
        """Send the notification on every configured channel (see the module docstring)."""
        body = self.payload(context)
        self.sent = []
        log.error("%s", body["text"])
        self.sent.append("log")
        url = self.webhook_url or os.environ.get(WEBHOOK_ENV)
        if url:
            try:
                post_json(url, body)
                self.sent.append("webhook")
            except OSError as exc:
                log.error("GC-Bench webhook %s failed: %s", _redact(url), exc)
        to = self.email_to or os.environ.get(EMAIL_ENV)
        if to:
            try:
                from airflow.utils.email import send_email

                subject = body["text"].splitlines()[0][:200]
                html = "<pre>" + _escape(body["text"]) + "</pre>"
                send_email([a.strip() for a in to.split(",") if a.strip()], subject, html)
                self.sent.append("email")
            except Exception as exc:  # noqa: BLE001 - SMTP and config errors of any kind: log, go on
                log.error("GC-Bench e-mail to %s failed: %s", to, exc)


def post_json(url: str, body: dict[str, Any], timeout_s: float = WEBHOOK_TIMEOUT_S) -> int:
    """POST ``body`` as JSON to an http(s) URL; returns the HTTP status.

    Raises:
        OSError: not an http(s) URL, connection refused, timeout, or a 4xx/5xx answer
            (``urllib.error.HTTPError`` is an OSError).
    """
    if not url.startswith(("http://", "https://")):
        raise OSError(f"webhook URL must be http(s), got {_redact(url)!r}")
    data = json.dumps(body, default=str).encode()
    req = urllib.request.Request(
        url, data=data, method="POST", headers={"Content-Type": "application/json", "User-Agent": "gcbench-notify"}
    )
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:  # noqa: S310 - scheme checked above
        return resp.status


def _redact(url: str) -> str:
    """The URL without its path and query (webhook URLs carry their secret there)."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname or ''}/..." if parts.scheme else "<url>"


def _escape(text: str) -> str:
    import html

    return html.escape(text)
