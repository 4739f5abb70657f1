"""Security defaults of the deployment files, checked without an engine.

The compose file publishes ports on 127.0.0.1 only (unless GCBENCH_BIND_ADDRESS says
otherwise), holds no password, mounts the Docker socket only into the scheduler with
the docker group's id, and the example env file holds placeholders only.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "docker-compose.yml"
ENV_EXAMPLE = REPO / "deploy" / "env.example"


def services() -> dict:
    return yaml.safe_load(COMPOSE.read_text())["services"]


def test_published_ports_bind_to_localhost_by_default():
    published = [(name, p) for name, svc in services().items() for p in svc.get("ports", [])]
    assert published, "the UI and the results database are published"
    for name, port in published:
        assert str(port).startswith("${GCBENCH_BIND_ADDRESS:-127.0.0.1}:"), (name, port)


def test_no_secret_in_the_compose_file():
    text = COMPOSE.read_text()
    for key in ("PASSWORD", "SECRET", "FERNET_KEY", "JWT"):
        for line in text.splitlines():
            m = re.match(rf"\s*[A-Z_]*{key}[A-Z_]*:\s*(.+)$", line)
            if m:
                assert m.group(1).strip().startswith("${"), line  # only ever from the env file
    assert not re.search(r"postgres(ql)?(\+psycopg2)?://[^:$]+:[^$@]+@", text), "a literal password in a URL"


def test_example_env_holds_placeholders_only():
    values = dict(
        line.split("=", 1) for line in ENV_EXAMPLE.read_text().splitlines() if line and not line.startswith("#")
    )
    for key, value in values.items():
        if re.search("PASSWORD|SECRET|FERNET", key):
            assert value == "change-me", key
    assert values["GCBENCH_BIND_ADDRESS"] == "127.0.0.1"


def test_env_file_is_ignored_by_git():
    for path in (".env", "deploy/.env"):
        proc = subprocess.run(["git", "check-ignore", "-q", path], cwd=REPO)
        assert proc.returncode == 0, f"{path} is not ignored by git"


def test_docker_socket_only_where_trials_start_through_the_docker_group():
    # the LocalExecutor scheduler, or a GPU host's Celery worker: the services that run trials
    for name, svc in services().items():
        mounts = [str(v) for v in svc.get("volumes", []) if isinstance(v, str)]
        has_socket = any("docker.sock" in v for v in mounts)
        assert has_socket == (name in ("airflow-scheduler", "airflow-worker-gpu")), name
    sched = services()["airflow-scheduler"]
    assert sched["group_add"] and sched["group_add"][0].startswith("${DOCKER_GID")
    assert "chmod" not in COMPOSE.read_text()


def test_results_role_is_not_the_database_owner():
    sql = (REPO / "deploy" / "postgres" / "init.sql").read_text()
    assert 'CREATE DATABASE :"results_db";' in sql  # owned by the superuser
    assert 'CREATE SCHEMA gcbench AUTHORIZATION :"results_user";' in sql
    assert 'REVOKE ALL ON DATABASE :"airflow_db" FROM PUBLIC;' in sql


def test_celery_profile_has_a_broker_and_workers_per_queue():
    svc = services()
    assert svc["redis"]["profiles"] == ["celery"] and svc["airflow-worker"]["profiles"] == ["celery"]
    assert svc["airflow-worker"]["command"] == "celery worker --queues default"
    gpu = svc["airflow-worker-gpu"]
    assert gpu["profiles"] == ["gpu-worker"]
    assert 'exec /entrypoint celery worker --queues "$$GCBENCH_QUEUE"' in gpu["entrypoint"][-1]
    assert "${GCBENCH_DOCKER_SOCKET:-/var/run/docker.sock}:/var/run/docker.sock" in gpu["volumes"]
    assert gpu["group_add"] == ["${DOCKER_GID:?set DOCKER_GID in .env (getent group docker | cut -d: -f3)}"]
    # the broker requires its password and the executor is chosen in the env file
    assert "--requirepass" in svc["redis"]["command"][-1]
    env = yaml.safe_load(COMPOSE.read_text())["x-airflow-env"]
    assert env["AIRFLOW__CORE__EXECUTOR"] == "${AIRFLOW_EXECUTOR:-LocalExecutor}"


def test_compose_overlays_touch_only_what_they_say():
    """deploy/compose.debian.yml sets only image and build; the test's GPU-host overlay only
    joins the central network (it stands for the private network between machines)."""
    debian = yaml.safe_load((REPO / "deploy" / "compose.debian.yml").read_text())
    assert set(debian) - {"services"} == {k for k in debian if k.startswith("x-")}
    assert set(debian["services"]) <= set(services()) | {"redis"}
    for name, svc in debian["services"].items():
        assert set(svc) <= {"image", "build"}, name
    gpu_host = yaml.safe_load((REPO / "tests" / "compose" / "gpu-host-network.yml").read_text())
    assert gpu_host == {
        "networks": {"default": {"name": "${GCBENCH_CENTRAL_NETWORK:?the central project's network}", "external": True}}
    }


def test_debian_airflow_constraints_pin_everything_the_image_installs():
    """images/debian/airflow-constraints.txt (scripts/airflow_constraints.py) pins the
    project's Airflow, every gcbench dependency and the providers the deployment adds."""
    import tomllib

    pins = {}
    for line in (REPO / "images" / "debian" / "airflow-constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            pins[re.sub(r"[-_.]+", "-", name).lower()] = version
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    for dep in deps:
        name = re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9._-]+", dep).group(0)).lower()
        assert name in pins, f"{name} is not pinned: run scripts/airflow_constraints.py"
    airflow = next(d for d in deps if d.startswith("apache-airflow=="))
    assert pins["apache-airflow"] == airflow.split("==")[1]
    assert {"apache-airflow-providers-fab", "apache-airflow-providers-celery", "celery", "redis"} <= set(pins)


def test_metrics_profile_runs_the_endpoint_prometheus_and_a_provisioned_grafana():
    """Prometheus and Grafana are optional (`--profile metrics`): Prometheus scrapes the
    gcbench-metrics service (`gcbench metrics serve`), Grafana gets it as data source and
    deploy/grafana/gcbench.json as dashboard; every file they mount exists."""
    import json

    svc = services()
    metrics = {name for name, s in svc.items() if "metrics" in s.get("profiles", [])}
    assert metrics == {"gcbench-metrics", "prometheus", "grafana"}
    for name in metrics:
        assert svc[name]["profiles"] == ["metrics"], name

    endpoint = svc["gcbench-metrics"]
    assert endpoint["entrypoint"][:3] == ["gcbench", "metrics", "serve"]
    port = endpoint["entrypoint"][endpoint["entrypoint"].index("--port") + 1]
    assert endpoint["entrypoint"][endpoint["entrypoint"].index("--host") + 1] == "0.0.0.0"  # reached by prometheus
    assert endpoint["image"] == yaml.safe_load(COMPOSE.read_text())["x-airflow-image"]["image"]
    assert endpoint["environment"]["GCBENCH_HOME"].startswith("${GCBENCH_STORAGE_DIR")  # the trials it reports
    assert "ports" not in endpoint  # only the compose network reaches it

    def mounted(name: str) -> dict[str, Path]:
        """container path -> host file of the service's ./ bind mounts (each must exist)."""
        out = {}
        for vol in svc[name]["volumes"]:
            host, container = vol.split(":")[:2]
            if host.startswith("./"):
                assert (REPO / host).exists(), f"{name} mounts {host}, which does not exist"
                out[container] = REPO / host
        return out

    prom = mounted("prometheus")
    config = yaml.safe_load(prom["/etc/prometheus/prometheus.yml"].read_text())
    targets = [t for job in config["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]]
    assert f"gcbench-metrics:{port}" in targets

    graf = mounted("grafana")
    sources_dir = graf["/etc/grafana/provisioning/datasources"]
    sources = [d for f in sorted(sources_dir.glob("*.yml")) for d in yaml.safe_load(f.read_text())["datasources"]]
    assert [(d["type"], d["url"], d["isDefault"]) for d in sources] == [("prometheus", "http://prometheus:9090", True)]
    providers_dir = graf["/etc/grafana/provisioning/dashboards"]
    providers = [p for f in sorted(providers_dir.glob("*.yml")) for p in yaml.safe_load(f.read_text())["providers"]]
    assert len(providers) == 1 and providers[0]["type"] == "file"
    dash_dir = providers[0]["options"]["path"]
    dashboards = {c: h for c, h in graf.items() if c.startswith(dash_dir + "/")}
    assert dashboards == {f"{dash_dir}/gcbench.json": REPO / "deploy" / "grafana" / "gcbench.json"}
    dashboard = json.loads(dashboards[f"{dash_dir}/gcbench.json"].read_text())
    # the dashboard picks its data source through a prometheus-typed variable, which the provisioned default fills
    assert {"name": "datasource", "type": "datasource", "query": "prometheus"}.items() <= next(
        v for v in dashboard["templating"]["list"] if v["name"] == "datasource"
    ).items()
    assert svc["grafana"]["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"] in dashboards
    assert svc["grafana"]["environment"]["GF_SECURITY_ADMIN_PASSWORD"].startswith("${")
    assert set(yaml.safe_load(COMPOSE.read_text())["volumes"]) >= {"prometheus-data", "grafana-data"}


def test_airflow_images_install_prometheus_client_for_the_metrics_endpoint():
    """The metrics service runs the Airflow image: both Dockerfiles install the export extra."""
    import tomllib

    export = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["export"]
    assert any(d.startswith("prometheus_client") for d in export)
    assert '".[export]"' in (REPO / "images" / "airflow.Dockerfile").read_text()
    debian = (REPO / "images" / "airflow-debian.Dockerfile").read_text()
    assert '["optional-dependencies"]["export"]' in debian and "gcbench.export.prometheus, prometheus_client" in debian
    pins = (REPO / "images" / "debian" / "airflow-constraints.txt").read_text().lower().replace("-", "_")
    assert "\nprometheus_client==" in pins
