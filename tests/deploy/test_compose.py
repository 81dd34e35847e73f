"""docker-compose.yml is a consistent deployment: the services, the image the Dockerfile builds,
the Spark master and worker wiring, MinIO's credentials and bucket as the pipeline uses them,
and the demo command, which must parse with the demo's own argument parser. ``docker compose
config`` validates the file too when Docker Compose is installed."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import urlparse

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES: dict[str, Any] = COMPOSE["services"]
CHANGELAKE_SERVICES = ("spark-master", "spark-worker", "pipeline")


def demo() -> ModuleType:
    pytest.importorskip("pyspark")
    spec = importlib.util.spec_from_file_location("cdc_pipeline", ROOT / "examples" / "cdc_pipeline.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses resolve their annotations through it
    spec.loader.exec_module(module)
    return module


def pipeline_args() -> dict[str, list[str]]:
    """The pipeline command's ``--flag value`` pairs (repeatable flags collect)."""
    command = SERVICES["pipeline"]["command"]
    args: dict[str, list[str]] = {}
    for flag, value in zip(command[2::2], command[3::2], strict=True):
        args.setdefault(flag, []).append(value)
    return args


def published(service: str) -> set[int]:
    return {int(str(p).split(":")[-1]) for p in SERVICES[service].get("ports", [])}


def test_the_services() -> None:
    assert set(SERVICES) == {"minio", "create-bucket", "spark-master", "spark-worker", "pipeline"}
    assert set(COMPOSE["volumes"]) == {"minio-data", "shared"}


def test_changelake_services_run_the_image_the_dockerfile_builds() -> None:
    for name in CHANGELAKE_SERVICES:
        assert SERVICES[name]["build"] == ".", name
        assert SERVICES[name]["image"] == "changelake:latest", name
    dockerfile = (ROOT / "Dockerfile").read_text()
    python = re.search(r"^FROM python:(\d+\.\d+)", dockerfile, re.MULTILINE)
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert python is not None and requires == f">={python.group(1)}"
    assert 'pip install --no-cache-dir ".[spark,s3]"' in dockerfile
    assert "openjdk-17-jre-headless" in dockerfile  # Spark 4 needs Java 17 or 21
    for copied in ("src", "examples", "pyproject.toml"):
        assert re.search(rf"^COPY .*\b{copied}\b", dockerfile, re.MULTILINE), copied
        assert (ROOT / copied).exists()
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert ".venv" in ignored and ".git" in ignored


def test_the_worker_and_the_pipeline_use_the_master() -> None:
    master = SERVICES["spark-master"]["command"]
    assert master[:2] == ["spark-class", "org.apache.spark.deploy.master.Master"]
    host, port, ui = (master[master.index(flag) + 1] for flag in ("--host", "--port", "--webui-port"))
    assert host == "spark-master" and {int(port), int(ui)} <= published("spark-master")
    url = f"spark://{host}:{port}"
    worker = SERVICES["spark-worker"]["command"]
    assert worker[:2] == ["spark-class", "org.apache.spark.deploy.worker.Worker"] and worker[-1] == url
    assert "spark-master" in SERVICES["spark-worker"]["depends_on"]
    args = pipeline_args()
    assert args["--master"] == [url]
    # executors connect back to the driver by the pipeline's host name
    assert args["--driver-host"] == [SERVICES["pipeline"]["hostname"]]


def test_the_pipeline_reaches_minio_with_its_credentials_and_bucket() -> None:
    minio = SERVICES["minio"]
    user, password = minio["environment"]["MINIO_ROOT_USER"], minio["environment"]["MINIO_ROOT_PASSWORD"]
    options = dict(o.split("=", 1) for o in pipeline_args()["--option"])
    assert options["s3.access-key"] == user and options["s3.secret-key"] == password
    endpoint = urlparse(options["s3.endpoint"])
    assert endpoint.hostname == "minio" and endpoint.port in published("minio")
    warehouse = urlparse(pipeline_args()["--warehouse"][0])
    assert warehouse.scheme == "s3"
    create = SERVICES["create-bucket"]["command"][0]
    assert f"mc alias set lake {options['s3.endpoint']} {user} {password}" in create
    assert f"mc mb --ignore-existing lake/{warehouse.netloc}" in create
    assert SERVICES["create-bucket"]["depends_on"]["minio"]["condition"] == "service_healthy"
    assert SERVICES["pipeline"]["depends_on"]["create-bucket"]["condition"] == "service_completed_successfully"


def test_the_pipeline_runs_the_demo_with_arguments_it_accepts() -> None:
    command = SERVICES["pipeline"]["command"]
    assert command[:2] == ["python", "examples/cdc_pipeline.py"]
    args = demo().parse_args(command[2:])
    assert args.master == pipeline_args()["--master"][0] and args.warehouse.startswith("s3://")
    # the event files are read by the executors: the work directory is on a volume both mount
    mounts = {name: {v.split(":")[1]: v.split(":")[0] for v in SERVICES[name]["volumes"]}
              for name in ("spark-worker", "pipeline")}
    shared = [path for path in mounts["pipeline"] if args.workdir.startswith(path + "/")]
    assert shared and mounts["spark-worker"].get(shared[0]) == mounts["pipeline"][shared[0]]


def test_the_demo_rejects_a_malformed_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        demo().parse_args(["--option", "s3.endpoint"])
    assert "not KEY=VALUE" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        demo().parse_args(["--option", "s3.endpoint-url=http://minio:9000"])
    assert "s3.endpoint-url" in capsys.readouterr().err


def compose_command() -> list[str] | None:
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True,
                                                 check=False).returncode == 0:
        return ["docker", "compose"]
    return ["docker-compose"] if shutil.which("docker-compose") else None


@pytest.mark.skipif(compose_command() is None, reason="Docker Compose is not installed")
def test_docker_compose_config_validates() -> None:
    command = compose_command()
    assert command is not None
    result = subprocess.run([*command, "-f", str(ROOT / "docker-compose.yml"), "config", "--quiet"],
                            capture_output=True, text=True, check=False, cwd=ROOT)
    assert result.returncode == 0, result.stderr
