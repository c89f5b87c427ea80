"""The library's front door: one list of exports, each importable, and the docs list the same names."""

import re
from pathlib import Path

import pytest

import outoforder

DOCS = Path(__file__).parents[2] / "docs" / "operators.md"


def test_every_export_imports_and_names_itself():
    for name in outoforder.__all__:
        assert getattr(outoforder, name).__name__ == name


def test_the_docs_list_exactly_the_exports():
    text = DOCS.read_text()
    paragraph = text[text.index("The front door is") :].split("\n\n", 1)[0]
    listed = set(re.findall(r"`(\w+)`", paragraph.split(":", 1)[1]))
    assert listed == set(outoforder.__all__)


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="NoSuchThing"):
        outoforder.NoSuchThing  # noqa: B018
