"""The user-facing facade: Catalog, Table, Scan and writers, thin classes over the layers below."""
