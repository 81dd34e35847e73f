"""The API reference ``./dev docs`` builds from the docstrings (pdoc): every public name of
``changelake`` and ``changelake.streaming`` is on its page with its docstring."""

from __future__ import annotations

import inspect
from pathlib import Path

import pdoc

import changelake
from changelake import streaming


def test_the_api_reference_documents_every_public_name(tmp_path: Path) -> None:
    pdoc.pdoc("changelake", "changelake.streaming", output_directory=tmp_path)
    for module, page in ((changelake, tmp_path / "changelake.html"),
                         (streaming, tmp_path / "changelake" / "streaming.html")):
        html = page.read_text()
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.ismodule(obj):  # a submodule gets a page of its own
                assert (tmp_path / "changelake" / f"{name}.html").exists(), f"no page for {obj.__name__}"
                continue
            assert f'id="{name}"' in html, f"{module.__name__}.{name} is missing from the API reference"
            if inspect.isclass(obj) or inspect.isfunction(obj):
                doc = inspect.getdoc(obj)
                assert doc, f"{module.__name__}.{name} has no docstring"
    table = (tmp_path / "changelake.html").read_text()
    assert 'id="Table.write"' in table and 'id="Catalog.create_table"' in table
