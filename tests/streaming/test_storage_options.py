"""Paimon's S3 options among a data source's options become the s3fs storage options."""

from __future__ import annotations

import pytest

from changelake.errors import OptionError
from changelake.streaming import storage_options


def test_s3_options_become_storage_options_and_the_rest_stays() -> None:
    rest, storage = storage_options.split({
        "path": "s3://b/w/db.db/t", "read.changelog": "true", "s3.endpoint": "http://127.0.0.1:9000",
        "s3.access-key": "AK", "s3.secret-key": "SK", "s3.region": "eu-west-1", "s3.path.style.access": "true"})
    assert rest == {"path": "s3://b/w/db.db/t", "read.changelog": "true"}
    assert storage == {"key": "AK", "secret": "SK", "config_kwargs": {"s3": {"addressing_style": "path"}},
                       "client_kwargs": {"endpoint_url": "http://127.0.0.1:9000", "region_name": "eu-west-1"}}
    assert storage_options.split({"scan.mode": "latest"}) == ({"scan.mode": "latest"}, {})


def test_an_unknown_s3_option_is_refused() -> None:
    with pytest.raises(OptionError, match="is not an S3 option") as refused:
        storage_options.split({"s3.acess-key": "AK"})
    assert refused.value.option == "s3.acess-key"
