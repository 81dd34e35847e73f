"""Errors carry their subject as fields and format it once; they survive pickling."""

from __future__ import annotations

import pickle

import pytest

from changelake import errors


def test_error_fields_are_formatted_in_one_place() -> None:
    error = errors.OptionError("has invalid value 'x'", table="db.t", option="bucket")
    assert str(error) == "table db.t: option 'bucket': has invalid value 'x'"
    assert (error.table, error.option, error.column, error.file) == ("db.t", "bucket", None, None)
    assert str(errors.CorruptMetadataError("is missing", file="/w/s")) == "file /w/s: is missing"
    assert str(errors.ChangelakeError("plain")) == "plain"


def test_in_table_names_the_table_once() -> None:
    error = errors.DataError("sum overflows int8", column="n")
    named = error.in_table("db.t")
    assert str(named) == "table db.t: column 'n': sum overflows int8"
    assert isinstance(named, errors.DataError) and error.table is None
    assert named.in_table("db.other") is named


@pytest.mark.parametrize("error", [
    errors.NullKeyError("has 1 null values", table="db.t", column="id"),
    errors.CdcError("is 'avro'; expected one of debezium-json, canal-json, maxwell-json", option="format"),
    errors.MissingExtraError("needs polars: pip install 'changelake[polars]'", table="db.t"),
    errors.StorageConfigError("nosuch://b/w: Protocol not known: nosuch"),
    errors.UnsafeStorageError("dir:// cannot create a file only if it is absent", file="w/db.db/t/snapshot/snapshot-1"),
    errors.StorageError("read failed: OSError: [Errno 121] Internal Server Error", file="b/w/db.db/t/snapshot/LATEST"),
    errors.CommitOutcomeUnknownError("creating the file failed 5 times", file="b/w/db.db/t/snapshot/snapshot-7"),
])  # fmt: skip
def test_errors_pickle_with_their_fields(error: errors.ChangelakeError) -> None:
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert (copy.table, copy.option, copy.column, copy.file, str(copy)) == (
        error.table, error.option, error.column, error.file, str(error))
