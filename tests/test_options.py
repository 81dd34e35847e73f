"""The options registry: parsing once, defaults, validation with did-you-mean, docs."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from changelake import option_values, options
from changelake.errors import OptionError
from changelake.option_spec import OptionEffect


def test_memory_sizes_and_durations() -> None:
    assert option_values.parse_memory_size("256 mb") == 256 << 20
    assert option_values.parse_memory_size("64MB") == 64 << 20
    assert option_values.parse_memory_size("1024") == 1024
    assert option_values.parse_duration_ms("10 s") == 10_000
    assert option_values.parse_duration_ms("1 h") == 3_600_000
    with pytest.raises(ValueError):
        option_values.parse_memory_size("lots")


def test_unknown_option_suggests_the_known_one() -> None:
    with pytest.raises(OptionError, match=r"'target-file-sise'.*did you mean 'target-file-size'") as info:
        options.TableOptions.parse({"target-file-sise": "1 mb"}, table="db.t", new=True)
    assert (info.value.table, info.value.option) == ("db.t", "target-file-sise")


def test_field_options_are_known() -> None:
    parsed = options.TableOptions.parse({"fields.v.aggregate-function": "sum", "bucket": "2"}, table="db.t", new=True)
    assert parsed.bucket == 2
    assert parsed.raw["fields.v.aggregate-function"] == "sum"


def test_unknown_options_of_existing_tables_are_tolerated() -> None:
    parsed = options.TableOptions.parse({"some.future-option": "x"}, table="db.t")
    assert parsed.raw == {"some.future-option": "x"}


# The fallback keys (``withFallbackKeys``) of Paimon 0.9's CoreOptions for the options changelake
# declares: tables Paimon created may carry them.
PAIMON_FALLBACKS = [
    ("write.compaction-skip", "true", "write_only", True),
    ("log.scan", "latest", "scan_mode", option_values.ScanMode.LATEST),
    ("log.scan.timestamp-millis", "1700000000000", "scan_timestamp_millis", 1700000000000),
    ("compaction.early-max.file-num", "7", "compaction_max_file_num", 7),
    ("changelog-producer.lookup-wait", "false", "lookup_wait", False),
    ("first-row.ignore-delete", "true", "ignore_delete", True),
    ("deduplicate.ignore-delete", "true", "ignore_delete", True),
    ("partial-update.ignore-delete", "true", "ignore_delete", True),
]


@pytest.mark.parametrize(("key", "text", "field", "value"), PAIMON_FALLBACKS)
def test_paimons_fallback_keys_are_read(key: str, text: str, field: str, value: object) -> None:
    parsed = options.TableOptions.parse({key: text}, table="db.t", new=True)
    assert getattr(parsed, field) == value


def test_defaults() -> None:
    parsed = options.TableOptions.parse({}, table="db.t")
    assert parsed.target_file_size == 128 << 20
    assert parsed.file_compression == "zstd"
    assert parsed.merge_engine is options.MergeEngineKind.DEDUPLICATE
    assert parsed.changelog_producer is options.ChangelogProducer.NONE
    assert parsed.scan_mode is options.ScanMode.DEFAULT
    assert parsed.partition_default_name == "__DEFAULT_PARTITION__"
    assert parsed.full_compaction_delta_commits is None
    assert parsed.bucket_key == ()


def test_values_parse_once_into_their_types() -> None:
    parsed = options.TableOptions.parse(
        {"merge-engine": "First-Row", "write-buffer-size": "64 kb", "sequence.field": "a, b",
         "file.compression": "uncompressed", "snapshot.time-retained": "2 min"},
        table="db.t",
    )
    assert parsed.merge_engine is options.MergeEngineKind.FIRST_ROW
    assert parsed.write_buffer_size == 64 << 10
    assert parsed.sequence_field == ("a", "b")
    assert parsed.file_compression == "none"
    assert parsed.snapshot_time_retained == 120_000


def test_derived_defaults_follow_the_compaction_trigger() -> None:
    parsed = options.TableOptions.parse({"num-sorted-run.compaction-trigger": "3"}, table="db.t")
    assert (parsed.stop_trigger, parsed.num_levels) == (6, 4)
    explicit = options.TableOptions.parse({"num-sorted-run.compaction-trigger": "3", "num-levels": "9"}, table="db.t")
    assert explicit.num_levels == 9


@pytest.mark.parametrize(("key", "value"), [("bucket", "0"), ("merge-engine", "latest"), ("write-only", "yes"),
                                            ("scan.mode", "sometimes"), ("target-file-size", "big")])
def test_bad_values_name_the_option(key: str, value: str) -> None:
    with pytest.raises(OptionError, match=rf"table db\.t: option '{key}'.*{value!r}") as info:
        options.TableOptions.parse({key: value}, table="db.t")
    assert info.value.option == key


def test_every_option_is_documented_once() -> None:
    specs = options.TableOptions.specs()
    keys = [spec.key for spec in specs]
    assert len(keys) == len(set(keys))
    assert all(spec.doc for spec in specs)
    table = options.markdown_table()
    assert all(f"`{key}`" in table for key in keys)


def test_the_options_page_is_generated_from_the_registry() -> None:
    page = (Path(__file__).parent.parent / "docs" / "options.md").read_text()
    assert page.endswith(options.markdown_table()), "docs/options.md is stale: run ./dev docs"


def test_the_options_page_says_truly_which_options_changelake_acts_on() -> None:
    """An option changelake acts on is read by the engine (or has values it refuses); one it only
    stores is read nowhere: the page's "changelake" column cannot drift from the code."""
    sources = [p.read_text() for p in (Path(options.__file__).parent).rglob("*.py")
               if p.name not in ("options.py", "option_spec.py")]
    for field in dataclasses.fields(options.TableOptions):
        spec = field.metadata.get("option")
        if spec is None:
            continue
        read = any(re.search(rf"\.{field.name}\b", text) for text in sources)
        if spec.effect is OptionEffect.STORES:
            assert not read, f"{spec.key} is read by the engine: it acts on it"
        else:
            assert read or spec.supports is not None, \
                f"{spec.key}: nothing reads it; declare it effect=OptionEffect.STORES"
