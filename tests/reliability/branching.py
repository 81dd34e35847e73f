"""The crash test's ``branches`` mode: before and after writing, each child runs a round of
branch operations that leave the table's rows as the model says, so a kill anywhere inside one is
checked by the next child's verification of the table like any other kill.

A round first completes what a killed round left (a branch it made is deleted; a staging
directory a killed creation left is ignored by every reader), then: the ``kept`` branch is made
once per episode from the latest snapshot and read whole (the table's expiry and orphan
cleanup must keep its files); a tag of the latest snapshot, a ``copy`` branch from it, a full
compaction in the branch (the same rows) and a tag of it, a fast-forward of the table to the
branch (which brings the branch's COMPACT snapshot and its tag into the table), then the
branch and the tags deleted.
"""

from __future__ import annotations

import sys
from datetime import timedelta

import workload
from workload import Mode

import changelake as cl
from changelake.table.io.killpoints import KillPoint

BASE_TAG = "branch-base"
COMPACTED_TAG = "branch-compacted"  # the branch's compaction, tagged in the branch
COPY = "copy"
KEPT = "kept"
MODE = Mode("branches", one_shot=False, engine="deduplicate", options=workload.COMPACTION | workload.EXPIRY)
POINTS = (KillPoint.BRANCH_CREATED, KillPoint.BRANCH_DELETE, KillPoint.FAST_FORWARD)


def branch_round(table: cl.Table) -> None:
    """One round of branch operations (see the module's docstring); exits with code 6 when a
    branch reads otherwise than the table it was made from."""
    for name in table.list_branches():
        if name != KEPT:
            table.delete_branch(name)
    for tag in (BASE_TAG, COMPACTED_TAG):
        if tag in table.tags():
            table.delete_tag(tag)
    latest = table.latest_snapshot()
    if latest is None:
        return
    if KEPT not in table.list_branches():
        table.create_branch(KEPT, from_snapshot=latest.id)
    table.branch(KEPT).scan().to_arrow()  # raises if the table's maintenance deleted a file it names
    table.remove_orphan_files(older_than=timedelta(0))  # no writer runs: nothing new is an orphan
    table.create_tag(BASE_TAG, latest.id)
    copy = table.create_branch(COPY, from_tag=BASE_TAG)
    rows = table.scan().to_arrow().sort_by([("p", "ascending"), ("k", "ascending")])
    if copy.compact(full=True) is not None:
        copy.create_tag(COMPACTED_TAG)
    if not copy.scan().to_arrow().sort_by([("p", "ascending"), ("k", "ascending")]).equals(rows):
        sys.exit(6)
    table.fast_forward(COPY)
    if not table.scan().to_arrow().sort_by([("p", "ascending"), ("k", "ascending")]).equals(rows):
        sys.exit(6)
    table.delete_branch(COPY)
    for tag in (BASE_TAG, COMPACTED_TAG):
        if tag in table.tags():
            table.delete_tag(tag)
