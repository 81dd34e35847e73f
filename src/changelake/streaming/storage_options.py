"""Paimon's S3 filesystem options among a data source's string options (``s3.endpoint``,
``s3.access-key``, ... as Paimon's S3 file IO and pypaimon name them), turned into the s3fs
storage options that open the table. Spark plans a Python data source in a worker process of
its own, so the options are the one way to give it the store's settings; the opened table
then carries them to the executors by pickling."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from changelake.errors import OptionError

PREFIX = "s3."
_PLAIN = {"s3.access-key": "key", "s3.secret-key": "secret", "s3.session-token": "token"}
_CLIENT = {"s3.endpoint": "endpoint_url", "s3.region": "region_name"}
_PATH_STYLE = ("s3.path.style.access", "s3.path-style-access")
KEYS = (*_PLAIN, *_CLIENT, *_PATH_STYLE)


def split(options: Mapping[str, str]) -> tuple[dict[str, str], dict[str, Any]]:
    """The options that are not ``s3.*``, and the s3fs storage options the ``s3.*`` ones make
    (empty when there are none); OptionError for an ``s3.*`` key Paimon does not define."""
    rest = {k: v for k, v in options.items() if not k.lower().startswith(PREFIX)}
    storage: dict[str, Any] = {}
    client: dict[str, str] = {}
    for key, value in options.items():
        name = key.lower()
        if not name.startswith(PREFIX):
            continue
        if name in _PLAIN:
            storage[_PLAIN[name]] = value
        elif name in _CLIENT:
            client[_CLIENT[name]] = value
        elif name in _PATH_STYLE:
            if value.strip().lower() == "true":
                storage["config_kwargs"] = {"s3": {"addressing_style": "path"}}
        else:
            raise OptionError(f"is not an S3 option; expected one of {', '.join(KEYS)}", option=key)
    if client:
        storage["client_kwargs"] = client
    return rest, storage
