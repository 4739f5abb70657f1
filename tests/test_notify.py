"""RegressionNotifier: always logs; POSTs to a webhook and sends e-mail when configured.

No network: the webhook is an HTTP server and the mail server an SMTP responder, both
on 127.0.0.1 in this process.
"""

from __future__ import annotations

import json
import logging
import socket
import socketserver
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from gcbench.notify import RegressionNotifier, post_json
from gcbench.regression import GroupCheck, RegressionError, RegressionResult


def _result() -> RegressionResult:
    g = GroupCheck(
        "h2d[memory=pinned]",
        "h2d",
        "gpu_j_per_gb",
        "regression",
        3,
        21,
        7,
        median_tonight=2.415,
        median_baseline=2.3,
        pct_change=5.0,
        pct_ci_low=3.9,
        pct_ci_high=6.1,
        p_mannwhitney=0.001,
        p_mannwhitney_holm=0.003,
        p_welch=0.0004,
        threshold_pct=3.0,
    )
    ok = GroupCheck(
        "noop",
        "noop",
        "duration_s",
        "unchanged",
        3,
        21,
        7,
        median_tonight=1.2,
        median_baseline=1.2,
        pct_change=0.1,
        pct_ci_low=-0.5,
        pct_ci_high=0.7,
        p_mannwhitney=0.8,
        p_mannwhitney_holm=0.8,
        p_welch=0.7,
        threshold_pct=3.0,
    )
    return RegressionResult(
        "gcbench__nightly", "scheduled__2026-03-08T02:00:00+00:00", "2026-03-08T02:00:00+00:00", [ok, g]
    )


class _Ti:
    dag_id, task_id = "gcbench__nightly", "regression_check"


def _context(exc: BaseException | None) -> dict:
    return {"exception": exc, "ti": _Ti(), "run_id": "scheduled__2026-03-08T02:00:00+00:00"}


@pytest.fixture
def webhook():
    """An HTTP server on 127.0.0.1 recording POSTed JSON bodies; yields (url, bodies)."""
    bodies: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's name
            n = int(self.headers["Content-Length"])
            bodies.append(
                {"path": self.path, "type": self.headers["Content-Type"], "json": json.loads(self.rfile.read(n))}
            )
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    srv = HTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/hooks/secret-token", bodies
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def smtp_server():
    """A minimal SMTP responder on 127.0.0.1 recording (from, to, data); yields (port, mails)."""
    mails: list[dict] = []

    class Handler(socketserver.StreamRequestHandler):
        def handle(self):
            mail: dict = {"to": []}
            self.wfile.write(b"220 test ESMTP\r\n")
            while line := self.rfile.readline():
                cmd = line.decode().strip()
                verb = cmd.split(" ")[0].upper()
                if verb in ("EHLO", "HELO"):
                    self.wfile.write(b"250 test\r\n")
                elif verb == "MAIL":
                    mail["from"] = cmd.split(":", 1)[1].strip()
                    self.wfile.write(b"250 ok\r\n")
                elif verb == "RCPT":
                    mail["to"].append(cmd.split(":", 1)[1].strip())
                    self.wfile.write(b"250 ok\r\n")
                elif verb == "DATA":
                    self.wfile.write(b"354 go on\r\n")
                    data = b""
                    while not data.endswith(b"\r\n.\r\n"):
                        data += self.rfile.readline()
                    mail["data"] = data.decode()
                    mails.append(mail)
                    self.wfile.write(b"250 queued\r\n")
                elif verb == "QUIT":
                    self.wfile.write(b"221 bye\r\n")
                    return
                else:
                    self.wfile.write(b"250 ok\r\n")

    srv = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv.server_address[1], mails
    srv.shutdown()
    srv.server_close()


def test_regression_is_logged_without_any_channel_configured(monkeypatch, caplog):
    monkeypatch.delenv("GCBENCH_WEBHOOK_URL", raising=False)
    monkeypatch.delenv("GCBENCH_NOTIFY_EMAIL", raising=False)
    notifier = RegressionNotifier()
    with caplog.at_level(logging.ERROR, logger="gcbench.notify"):
        notifier.notify(_context(RegressionError(_result())))
    assert notifier.sent == ["log"]
    text = caplog.text
    assert (
        "GC-Bench energy regression: gcbench__nightly scheduled__2026-03-08T02:00:00+00:00: 1 energy regression(s)"
        in text
    )
    assert "h2d[memory=pinned]: regression: gpu_j_per_gb 2.415 tonight vs 2.3 over 7 nights, +5.00 %" in text


def test_webhook_receives_the_regression_as_json(monkeypatch, webhook):
    url, bodies = webhook
    monkeypatch.setenv("GCBENCH_WEBHOOK_URL", url)
    monkeypatch.delenv("GCBENCH_NOTIFY_EMAIL", raising=False)
    notifier = RegressionNotifier()
    notifier(_context(RegressionError(_result())))  # as Airflow calls an on_failure_callback
    assert notifier.sent == ["log", "webhook"]
    (body,) = bodies
    assert body["path"] == "/hooks/secret-token" and body["type"] == "application/json"
    payload = body["json"]
    assert payload["dag_id"] == "gcbench__nightly" and payload["task_id"] == "regression_check"
    assert payload["regressions"] == 1
    bad = [g for g in payload["groups"] if g["verdict"] == "regression"]
    assert [g["variant"] for g in bad] == ["h2d[memory=pinned]"] and bad[0]["pct_change"] == 5.0
    assert payload["text"].startswith("GC-Bench energy regression:")


def test_other_failures_of_the_check_are_notified_too(webhook):
    url, bodies = webhook
    RegressionNotifier(webhook_url=url).notify(_context(ConnectionError("results database unreachable")))
    payload = bodies[0]["json"]
    assert payload["regressions"] is None
    assert payload["text"] == (
        "GC-Bench: regression_check of gcbench__nightly scheduled__2026-03-08T02:00:00+00:00 "
        "failed: ConnectionError: results database unreachable"
    )


def test_unreachable_webhook_is_logged_and_does_not_raise(caplog):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    notifier = RegressionNotifier(webhook_url=f"http://127.0.0.1:{port}/hook/tok3n")
    with caplog.at_level(logging.ERROR, logger="gcbench.notify"):
        notifier.notify(_context(RegressionError(_result())))
    assert notifier.sent == ["log"]
    assert "GC-Bench webhook http://127.0.0.1/... failed" in caplog.text
    assert "tok3n" not in caplog.text  # the URL's secret path is not logged


def test_post_json_refuses_non_http_urls():
    with pytest.raises(OSError, match="webhook URL must be http"):
        post_json("file:///etc/passwd", {})


def test_email_goes_through_airflow_smtp_settings(monkeypatch, smtp_server):
    port, mails = smtp_server
    monkeypatch.delenv("GCBENCH_WEBHOOK_URL", raising=False)
    monkeypatch.setenv("GCBENCH_NOTIFY_EMAIL", "energy@example.org, lead@example.org")
    monkeypatch.setenv("AIRFLOW__SMTP__SMTP_HOST", "127.0.0.1")
    monkeypatch.setenv("AIRFLOW__SMTP__SMTP_PORT", str(port))
    monkeypatch.setenv("AIRFLOW__SMTP__SMTP_STARTTLS", "False")
    monkeypatch.setenv("AIRFLOW__SMTP__SMTP_SSL", "False")
    monkeypatch.setenv("AIRFLOW__SMTP__SMTP_MAIL_FROM", "gcbench@example.org")
    monkeypatch.setenv("AIRFLOW__SMTP__SMTP_RETRY_LIMIT", "0")
    monkeypatch.setenv("AIRFLOW_CONN_SMTP_DEFAULT", f"smtp://127.0.0.1:{port}")
    notifier = RegressionNotifier()
    notifier.notify(_context(RegressionError(_result())))
    assert notifier.sent == ["log", "email"]
    (mail,) = mails
    assert mail["from"] == "<gcbench@example.org>"
    assert mail["to"] == ["<energy@example.org>", "<lead@example.org>"]
    assert "Subject: GC-Bench energy regression: gcbench__nightly" in mail["data"]
