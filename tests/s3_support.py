"""A real S3 HTTP endpoint on loopback for the tests: moto's server in a thread of the test
process, one per session (the ``s3`` fixture in conftest.py), and a fresh warehouse URL in
its bucket per test (``s3_warehouse``)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
from moto.server import ThreadedMotoServer

BUCKET = "changelake-tests"
REGION = "us-east-1"


@dataclass(frozen=True)
class S3Endpoint:
    """The endpoint, its bucket and the fsspec storage options that reach it."""

    endpoint_url: str
    bucket: str

    @property
    def storage_options(self) -> dict[str, Any]:
        return {"key": "testing", "secret": "testing",
                "client_kwargs": {"endpoint_url": self.endpoint_url, "region_name": REGION}}

    @property
    def paimon_options(self) -> dict[str, str]:
        """The same settings as Paimon's S3 options (pypaimon's catalog, the Spark data source)."""
        return {"s3.endpoint": self.endpoint_url, "s3.access-key": "testing", "s3.secret-key": "testing",
                "s3.region": REGION, "s3.path-style-access": "true"}

    def new_warehouse(self) -> str:
        """An ``s3://`` URL under which nothing exists yet."""
        return f"s3://{self.bucket}/{uuid.uuid4().hex}"

    def keys(self, prefix: str) -> list[str]:
        """The object keys under ``s3://bucket/prefix`` (without the bucket)."""
        client = boto3.client("s3", endpoint_url=self.endpoint_url, aws_access_key_id="testing",
                              aws_secret_access_key="testing", region_name=REGION)
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
        return [o["Key"] for page in pages for o in page.get("Contents", [])]


def moto_s3() -> Iterator[S3Endpoint]:
    """Start moto's S3 server on a free loopback port, create the bucket; stop it after."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one log line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = S3Endpoint(f"http://{host}:{port}", BUCKET)
        boto3.client("s3", endpoint_url=endpoint.endpoint_url, aws_access_key_id="testing",
                     aws_secret_access_key="testing", region_name=REGION).create_bucket(Bucket=BUCKET)
        yield endpoint
    finally:
        server.stop()
