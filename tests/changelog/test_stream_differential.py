"""Random histories (writes of +I/+U/-D by one-shot and long-lived writers, compactions, delete,
update, merge, overwrite, truncate, rescale, tags, rollback, snapshot expiry, schema changes) on
primary-key tables of every changelog producer and merge engine, checked through the change
streams a user reads: a stream folded (+I/+U upsert, -U/-D remove) over the state at its start
gives the table's state wherever the producer promises it (``input`` and ``lookup``: after every
commit; ``full-compaction``: after every full compaction), from every scan mode and from the
incremental reads between snapshots; a stream resumed from any saved offset reads exactly the
rest; a consumer holds its snapshots through expiry; a stream whose next snapshot expired
raises."""

from __future__ import annotations

import random
import tempfile
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import changelake as cl
import stream_model as model
from changelake import errors
from stream_model import CONFIGS, VALUES, Key, Row, State


class Run:
    """One random history on one table configuration, checked after every step."""

    def __init__(self, warehouse: str, config: str, seed: int) -> None:
        self.config = config
        self.options = {"bucket": "2", **CONFIGS[config]}
        self.table = cl.Catalog(warehouse).create_table("db.t", model.SCHEMA, primary_keys=["k", "p"],
                                                        partition_keys=["p"], options=self.options)
        self.engine = model.Engine.of(self.options)
        self.producer = self.options.get("changelog-producer", "none")
        self.row_dedup = self.options.get("changelog-producer.row-deduplicate") == "true"
        self.decoupled = "changelog.num-retained.max" in self.options
        self.read_overwrite = self.options.get("streaming-read-overwrite") == "true"
        self.rng = random.Random(seed)
        self.model: State = {}
        self.log: list[str] = []
        self.names = {c: c for c in ("k", "p", *VALUES)}
        self.aliases: dict[str, str] = {}  # every name a column had -> its canonical name
        self.has_w = False
        self.w_wide = False
        self.overwrote = False  # the step's operation replaced rows in an OVERWRITE streams skip
        # op boundaries: the latest snapshot after each step, with the state then
        self.states: dict[int, State] = {0: {}}
        self.consistent_from = 0  # boundaries before a skipped overwrite do not fold to the present
        self.unpromised: set[int] = set()  # boundaries where the changelog had not caught up
        self.full_compacted = True  # full-compaction.delta-commits > 1: whether the changelog caught up
        self.writers = [self.table.writer(), self.table.writer()]
        self.identifiers = [0, 0]
        self.tags: dict[str, int] = {}
        self.long = self.open_long()
        self.lagging: model.LongStream | None = None
        self.held: model.LongStream | None = None

    # -- helpers ----------------------------------------------------------------------------

    @property
    def promised(self) -> bool:
        """Whether the changelog now folds into the table's state."""
        if self.producer == "none":
            return self.engine.name == "deduplicate"
        if self.producer == "input":
            return self.engine.name == "deduplicate" and not self.engine.ignore_delete
        if self.producer == "full-compaction" and "full-compaction.delta-commits" in self.options:
            return self.full_compacted
        return True

    def latest(self) -> int:
        snapshot = self.table.latest_snapshot()
        return snapshot.id if snapshot else 0

    def open_long(self, consumer: str = "c") -> model.LongStream:
        long = self.tracked(self.table.stream(max_rows=self.rng.choice([1, 3, 100]), consumer_id=consumer))
        long.consumer = consumer
        return long

    def tracked(self, stream: cl.ChangeStream) -> model.LongStream:
        return model.LongStream(stream, {}, columns={self.aliases.get(c, c) for c in stream.schema.names})

    def drain(self, long: model.LongStream, *, exact: bool = True) -> list[Row]:
        got: list[Row] = []
        for batch in long.stream:
            rows = model.canonical(batch.data.to_pylist(), self.aliases)
            got.extend(rows)
            long.rows.extend(tuple(sorted(r.items())) for r in rows)
            long.saved.append(model.Saved(batch.offset, len(long.rows)))
        if self.exact and exact:
            problems = model.exact_fold(long.state, got, long.columns, row_dedup=self.row_dedup)
            assert not problems, ("changelog over the stream's state", problems, self.config, self.log)
        else:
            long.state = model.fold(long.state, got)
        return got

    @property
    def exact(self) -> bool:
        """Whether the changelog is complete: before-images, no +I of a key there."""
        return self.producer in ("lookup", "full-compaction")

    def changelog_view(self) -> State:
        """What the changelog has folded into by now: the table, or for full-compaction the top
        level (the rows the next full compaction diffs against)."""
        return self.read(read_optimized=True) if self.producer == "full-compaction" else dict(self.model)

    def row(self) -> Row:
        row = {"k": self.rng.randrange(8), "p": self.rng.choice("ab"), "v": self.rng.choice([None, *range(5)]),
               "s": self.rng.choice([None, "x", "y", "z" * 30]), "q": self.rng.choice([None, *range(4)])}
        if self.engine.name == "sequence" and row["q"] is None:
            row["q"] = self.rng.randrange(4)
        if self.has_w:
            row["w"] = self.rng.choice([None, 7, 1 << 20 if self.w_wide else 9])
        return row

    def arrow(self, rows: list[Row], kinds: list[str] | None = None) -> pa.Table:
        schema = self.table.schema
        columns = ("k", "p", "v", "s", "q", *(("w",) if self.has_w else ()))
        data = {self.names[c]: [r.get(c) for r in rows] for c in columns}
        table = pa.table({name: pa.array(values, schema.field(name).type) for name, values in data.items()})
        return table if kinds is None else table.append_column("rowkind", pa.array(kinds, pa.string()))

    def batch(self, n: int) -> tuple[list[Row], list[str]]:
        rows = [self.row() for _ in range(n)]
        if self.engine.deletes or self.engine.ignore_delete:
            kinds = [self.rng.choice(["+I", "+I", "+U", "-D"]) for _ in rows]
        else:
            kinds = ["+I"] * n
        return model.partial_batch(rows, kinds) if self.engine.name == "partial-update" else (rows, kinds)

    def apply(self, rows: list[Row], kinds: list[str]) -> None:
        for r, kind in zip(rows, kinds, strict=True):
            self.engine.apply(self.model, (r["k"], r["p"]), {c: r.get(c) for c in VALUES}, kind)

    # -- operations ---------------------------------------------------------------------------

    def op_write(self) -> None:
        rows, kinds = self.batch(self.rng.randrange(1, 8))
        self.log.append(f"write {list(zip(rows, kinds, strict=True))}")
        self.table.write(self.arrow(rows, kinds))
        self.apply(rows, kinds)

    def op_writer(self) -> None:
        i = self.rng.randrange(2)
        rows, kinds = self.batch(self.rng.randrange(1, 6))
        self.identifiers[i] += 1
        self.log.append(f"writer {i} commit {self.identifiers[i]} {list(zip(rows, kinds, strict=True))}")
        self.writers[i].write(self.arrow(rows, kinds))
        self.writers[i].commit(self.identifiers[i])
        self.apply(rows, kinds)

    def op_compact(self) -> None:
        full = self.rng.random() < 0.5
        self.log.append(f"compact full={full}")
        self.table.compact(full=full)

    def op_delete(self) -> None:
        if not self.engine.deletes:
            return
        limit = self.rng.randrange(6)
        self.log.append(f"delete k<{limit}")
        self.table.delete(pc.field("k") < limit)
        self.model = {key: r for key, r in self.model.items() if key[0] >= limit}

    def op_update(self) -> None:
        if not self.engine.updates:
            return
        part = self.rng.choice("ab")
        self.log.append(f"update p={part} v+=1")
        self.table.update(pc.field("p") == part, set={self.names["v"]: pc.field(self.names["v"]) + 1})
        for key, r in self.model.items():
            if key[1] == part and r["v"] is not None:
                self.model[key] = {**r, "v": r["v"] + 1}

    def op_merge(self) -> None:
        if not self.engine.deletes:
            return
        source = {}
        for _ in range(self.rng.randrange(1, 5)):
            r = self.row()
            source[(r["k"], r["p"])] = r
        limit = self.rng.randrange(5)
        self.log.append(f"merge {list(source.values())} delete v<{limit}")
        self.table.merge(self.arrow(list(source.values()))) \
            .when_matched_delete(condition=pc.field(f"target.{self.names['v']}") < limit) \
            .when_matched_update().when_not_matched_insert().execute()
        for key, r in source.items():
            old = self.model.get(key)
            if old is None:
                self.engine.apply(self.model, key, {c: r.get(c) for c in VALUES}, "+I")
            elif old["v"] is not None and old["v"] < limit:
                del self.model[key]
            else:
                self.engine.apply(self.model, key, {c: r.get(c) for c in VALUES}, "+U")

    def op_overwrite(self) -> None:
        part = self.rng.choice("ab")
        source = {}
        for _ in range(self.rng.randrange(0, 5)):
            r = {**self.row(), "p": part}
            source[(r["k"], r["p"])] = r
        self.log.append(f"overwrite p={part} {list(source.values())}")
        self.table.overwrite(self.arrow(list(source.values())), partitions={"p": part})
        self.model = {key: r for key, r in self.model.items() if key[1] != part}
        for key, r in source.items():
            self.model[key] = {c: r.get(c) for c in VALUES}
        self.overwrote = True

    def op_truncate(self) -> None:
        self.log.append("truncate")
        self.table.truncate()
        self.model = {}
        self.overwrote = True

    def op_rescale(self) -> None:
        if not self.latest() or self.options["bucket"] == "-1":
            return
        bucket = self.rng.randrange(1, 4)
        self.log.append(f"rescale {bucket}")
        self.table.rescale(bucket=bucket)
        self.reopen_writers()
        # Streams skip it; the changes not in the changelog yet (full-compaction.delta-commits)
        # go with it, as in Paimon: the rewritten files are the next full compaction's before.
        self.overwrote = not self.promised

    def op_tag(self) -> None:
        latest = self.latest()
        if latest:
            name = f"t{len(self.tags)}"
            self.log.append(f"tag {name} at {latest}")
            self.table.create_tag(name, latest)
            self.tags[name] = latest

    def op_rollback(self) -> None:
        live = sorted({s.id for s in self.table.snapshots()} & set(self.states))
        if not live:
            return
        target = self.rng.choice(live)
        self.log.append(f"rollback_to {target}")
        self.table.rollback_to(snapshot_id=target)
        self.model = {k: dict(r) for k, r in self.states[target].items()}
        self.states = {i: m for i, m in self.states.items() if i <= target}
        self.tags = {name: i for name, i in self.tags.items() if i <= target}
        self.consistent_from = min(self.consistent_from, target)
        self.reopen_writers()
        # the schema stays: partitions of another bucket number are rescaled before writes
        self.full_compacted = target not in self.unpromised
        if self.latest() and self.options["bucket"] != "-1":
            self.table.rescale()
            self.overwrote = not self.promised  # as op_rescale (unless the stream is new, below)
        if self.long.stream.offset.snapshot_id > target + 1 or self.long.stream.offset.scan_snapshot:
            with pytest.raises(errors.OffsetError):
                list(self.long.stream)
            if self.long.stream.offset.snapshot_id > target + 1 and self.promised:
                # its consumer moved back to the snapshot after the target: a new stream of it
                # reads the changes from there (the rescale after, an overwrite, is skipped)
                resumed = self.table.stream(consumer_id=self.long.consumer)
                assert resumed.offset.snapshot_id == target + 1, self.log
                self.stream_check("consumer after rollback", self.states[target], (self.config, self.log),
                                  consumer_id=self.long.consumer)
            self.long = self.open_long(consumer=f"c{len(self.log)}")
            self.overwrote = False
        self.lagging = None

    def op_expire(self) -> None:
        keep = self.rng.randrange(1, 3)
        self.log.append(f"expire retain_max={keep}")
        self.table.expire_snapshots(retain_max=keep, retain_min=1)

    def op_lag(self) -> None:
        """Open two streams drained only now and then: one without a consumer (its next
        snapshot may expire: a clear error) and one whose consumer holds its snapshots."""
        if self.lagging is None:
            self.log.append("open lagging")
            self.lagging = self.tracked(self.table.stream(max_rows=2))
            self.held = self.tracked(self.table.stream(max_rows=2, consumer_id=f"held{len(self.log)}"))
            for stream in (self.lagging, self.held):
                self.drain(stream, exact=False)  # they are not told of the overwrites they skip
            self.held.stream.commit()
            return
        self.log.append("drain lagging")
        try:
            self.drain(self.lagging, exact=False)
        except errors.SnapshotExpiredError:
            earliest = min(s.id for s in self.table.snapshots())
            assert self.lagging.stream.offset.snapshot_id < earliest or \
                self.overwrite_gap(self.lagging.stream.offset.snapshot_id), self.log
            self.lagging = None
        assert self.held is not None
        try:
            self.drain(self.held, exact=False)
        except errors.SnapshotExpiredError:
            assert self.overwrite_gap(self.held.stream.offset.snapshot_id), ("held by a consumer", self.log)
            self.lagging = None
        else:
            self.held.stream.commit()

    def op_add_column(self) -> None:
        if not self.has_w:
            self.log.append("add column w int32")
            with self.table.update_schema() as u:
                u.add_column("w", pa.int32())
            self.has_w = True
        elif not self.w_wide:
            self.log.append("widen w to int64")
            with self.table.update_schema() as u:
                u.update_column("w", pa.int64())
            self.w_wide = True
        elif self.engine.name != "aggregation":  # its options name the columns
            new = f"s{len(self.log)}"
            self.log.append(f"rename {self.names['s']} to {new}")
            with self.table.update_schema() as u:
                u.rename_column(self.names["s"], new)
            self.names["s"] = new
            self.aliases[new] = "s"
        self.reopen_writers()

    def reopen_writers(self) -> None:
        for w in self.writers:
            w.close()
        self.writers = [self.table.writer(), self.table.writer()]

    # -- checks -----------------------------------------------------------------------------

    def read(self, **scan: Any) -> State:
        out: State = {}
        for r in model.canonical(self.table.scan(**scan).to_arrow().to_pylist(), self.aliases):
            out[(r["k"], r["p"])] = {c: r.get(c) for c in VALUES}
        return out

    def stream_check(self, what: str, start: State, where: tuple[Any, ...], *,
                     keep: Callable[[Key, Row], bool] | None = None, **kwargs: Any) -> None:
        """A stream of ``kwargs`` folded over ``start`` gives the model (in the stream's columns;
        with a filter, the rows ``keep`` keeps of both)."""
        if keep is not None:
            start = {key: row for key, row in start.items() if keep(key, row)}
        stream = self.table.stream(**kwargs)
        columns = {self.aliases.get(c, c) for c in stream.schema.names}
        changes = [r for b in stream for r in model.canonical(b.data.to_pylist(), self.aliases)]
        if self.exact:
            state = {key: dict(row) for key, row in start.items()}
            problems = model.exact_fold(state, changes, columns, row_dedup=self.row_dedup)
            assert not problems, (what, kwargs, problems, *where)
        else:
            state = model.fold(start, changes)
        want = self.model if keep is None else {key: row for key, row in self.model.items() if keep(key, row)}
        assert model.same(state, want, columns), (what, kwargs, model.differences(state, want, columns), *where)

    def overwrite_gap(self, start: int) -> bool:
        """Whether a stream from snapshot ``start`` meets an OVERWRITE it is to read
        (streaming-read-overwrite) whose snapshot before has expired, with the files it removed."""
        earliest = min(s.id for s in self.table.snapshots())
        return self.read_overwrite and start <= earliest and earliest > 1 and \
            self.table.snapshot(earliest).commit_kind == "OVERWRITE"

    def check(self, step: int) -> None:
        where = (self.config, step, self.log)
        assert model.same(self.read(), self.model), ("read", model.differences(self.read(), self.model), *where)
        # the long stream (consumer "c"), then resumed from one of its saved offsets
        long = self.long
        before, in_full_read = dict(long.state), long.stream.offset.scan_snapshot
        try:
            self.drain(long)
        except errors.SnapshotExpiredError:
            # the consumer held the overwrite it reads next, not the snapshot it replaced
            assert self.overwrite_gap(long.stream.offset.snapshot_id), where
            self.long = self.open_long(consumer=f"c{len(self.log)}")
            self.drain(self.long)
            return
        long.stream.commit()
        if self.overwrote and not self.read_overwrite:
            # (a stream yet to make its first full read reads the overwrite's rows there)
            assert in_full_read or model.same(long.state, before), \
                ("an overwrite is skipped", model.differences(long.state, before), *where)
            long.state = self.changelog_view()
        elif self.promised:
            assert model.same(long.state, self.model, long.columns), \
                ("long stream", model.differences(long.state, self.model, long.columns), *where)
        if long.saved:
            saved = self.rng.choice(long.saved)
            try:
                resumed = self.table.stream(offset=saved.offset, max_rows=self.rng.choice([1, 2, 50]))
                rows = [tuple(sorted((c, v) for c, v in r.items() if c in long.columns))
                        for b in resumed for r in model.canonical(b.data.to_pylist(), self.aliases)]
            except errors.SnapshotExpiredError:
                assert (saved.offset.snapshot_id < min(s.id for s in self.table.snapshots())) or \
                    self.overwrite_gap(saved.offset.snapshot_id), where
            else:
                assert rows == long.rows[saved.position:], ("resumed", saved.offset, *where)
        if not self.promised:
            return
        latest = self.latest()
        if not latest:
            return
        live = {s.id for s in self.table.snapshots()}
        self.stream_check("latest-full", {}, where, mode="latest-full")
        self.stream_check("latest-full of a partition", {}, where, mode="latest-full", filter="p = 'b'",
                          keep=lambda key, row: key[1] == "b")
        if self.exact:  # a complete changelog's rows filtered one by one fold into the rows filtered
            self.stream_check("latest-full filtered", {}, where, mode="latest-full",
                              filter=f"{self.names['v']} >= 2", keep=lambda key, row: (row["v"] or 0) >= 2)
        if self.table.stream(mode="compacted-full").offset.snapshot_id >= self.consistent_from:
            self.stream_check("compacted-full", {}, where, mode="compacted-full")
        tags = [name for name, i in self.tags.items() if i >= self.consistent_from and i + 1 >= min(live)]
        if tags:  # a tag's rows (the tag keeps them past expiry), then the changes after it
            name = self.rng.choice(tags)
            if self.tags[name] in live:
                self.stream_check("from-snapshot-full at a tag", {}, where, mode="from-snapshot-full", tag=name)
            else:  # the tag keeps the snapshot's files, but a stream reads snapshots, not tags
                with pytest.raises(errors.SnapshotExpiredError):
                    self.table.stream(mode="from-snapshot-full", tag=name)
        boundaries = [b for b in self.states if self.consistent_from <= b < latest and b not in self.unpromised]
        if boundaries:
            b = self.rng.choice(boundaries)
            if self.overwrite_gap(b + 1):
                with pytest.raises(errors.SnapshotExpiredError):
                    list(self.table.stream(mode="from-snapshot", snapshot_id=b + 1))
            elif b + 1 in live or self.decoupled:
                try:  # an expired snapshot's changes are read while its changelog is kept
                    self.stream_check("from-snapshot", self.states[b], where, mode="from-snapshot",
                                      snapshot_id=b + 1)
                    changes = self.table.changes(b, latest)
                except errors.SnapshotExpiredError:
                    assert self.decoupled and b + 1 not in live, where
                else:
                    columns = {self.aliases.get(c, c) for c in changes.schema.names}
                    rows = model.canonical(changes.to_arrow().to_pylist(), self.aliases)
                    state = model.fold(self.states[b], rows)
                    assert model.same(state, self.model, columns), \
                        ("changes", b, model.differences(state, self.model, columns), *where)
                if b + 1 in live:
                    millis = self.table.snapshot(b + 1).time_millis
                    # snapshots of the same millisecond: the first of them
                    if all(self.table.snapshot(i).time_millis < millis for i in live if i <= b):
                        self.stream_check("from-timestamp", self.states[b], where, mode="from-timestamp",
                                          timestamp_ms=millis)
            else:
                with pytest.raises(errors.SnapshotExpiredError):
                    self.table.stream(mode="from-snapshot", snapshot_id=b + 1)
            if b in live and b:
                self.stream_check("from-snapshot-full", {}, where, mode="from-snapshot-full", snapshot_id=b)

    # -- the run ------------------------------------------------------------------------------

    def run(self, steps: int) -> None:
        ops: list[Callable[[], None]] = [
            self.op_write, self.op_write, self.op_write, self.op_writer, self.op_writer, self.op_compact,
            self.op_compact, self.op_delete, self.op_update, self.op_merge, self.op_overwrite, self.op_truncate,
            self.op_rescale, self.op_tag, self.op_rollback, self.op_expire, self.op_lag, self.op_add_column]
        try:
            for step in range(steps):
                op = self.rng.choice(ops)
                self.overwrote = False
                before = self.latest()
                op()
                latest = self.latest()
                if self.overwrote and not self.read_overwrite:
                    self.consistent_from = latest
                if "full-compaction.delta-commits" in self.options and latest > before:
                    self.full_compacted = op == self.op_compact and "full=True" in self.log[-1]
                self.check(step)
                if latest > before or op == self.op_rollback:
                    self.states[latest] = {k: dict(r) for k, r in self.model.items()}
                    if not self.promised:
                        self.unpromised.add(latest)
        except BaseException as e:
            e.add_note("\n".join(self.log))
            raise
        finally:
            for w in self.writers:
                w.close()


@pytest.mark.parametrize("config", list(CONFIGS))
def test_streams_fold_into_the_table(config: str) -> None:
    with tempfile.TemporaryDirectory() as warehouse:
        Run(warehouse, config, seed=1).run(14)
