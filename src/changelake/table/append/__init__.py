"""Append tables (no primary key): the second kind of table context. Their files hold the table's
columns only, in write order; nothing is merged. Writing, splitting, compacting and checking
their definitions live here; commit, snapshots, maintenance and read planning are shared with
primary-key tables."""
