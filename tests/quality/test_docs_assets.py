"""Data Docs pages load nothing from another origin: the pinned copies, and the pages pointed at them."""

from __future__ import annotations

import io
import re
import tarfile

import pytest

from outoforder.errors import ConfigError
from outoforder.quality import docs_assets

# the loading tags of a page as Great Expectations 1.x writes them (one of each kind)
GX_HEAD = """<html><head>
<link rel="stylesheet" href="https://maxcdn.bootstrapcdn.com/bootstrap/4.3.1/css/bootstrap.min.css"/>
<link rel="stylesheet" href="https://cdnjs.cloudflare.com/ajax/libs/font-awesome/6.6.0/css/all.min.css">
<link rel="stylesheet" type="text/css" href="https://unpkg.com/bootstrap-table@1.19.0/dist/extensions/filter-control/bootstrap-table-filter-control.css">
<script src="https://code.jquery.com/jquery-3.7.1.min.js"></script>
<script src="https://stackpath.bootstrapcdn.com/bootstrap/4.3.1/js/bootstrap.min.js" \
integrity="sha384-JjSmVgyd0p3pXB1rRibZUAYoIIy6OrQ6VrjIEaFf/nJGzIxFDsf4x0xIM+B07jRM" \
crossorigin="anonymous"></script>
<script src="https://cdn.jsdelivr.net/npm/vega@5"></script>
<script src="https://cdn.jsdelivr.net/npm/vega-embed@6"></script>
</head><body>
<img src="https://great-expectations-web-assets.s3.us-east-2.amazonaws.com/logo-long.png?d=20261127T1">
<a href="https://greatexpectations.io">Great Expectations</a>
<script src="https://cdn.example.org/something-new.js"></script>
</body></html>
"""
LOADS = re.compile(r'<(?:script|img)[^>]*\bsrc="([^"]+)"|<link[^>]*rel="stylesheet"[^>]*href="([^"]+)"')


def test_every_address_the_pages_load_has_a_pinned_copy_that_setup_fetched():
    assets = docs_assets.assets_dir()
    assert (assets / ".complete").is_file(), "infra/setup.sh fetches them"
    pkgs = docs_assets.packages()
    for pkg in pkgs:
        assert re.fullmatch(r"\d+\.\d+\.\d+", pkg.version), pkg  # exact versions, never "@5"
        assert pkg.integrity.startswith("sha512-")
        for path in pkg.files.values():
            assert (assets / pkg.folder / path).is_file(), (pkg.name, path)
    fonts = assets / "@fortawesome/fontawesome-free@6.6.0"
    named = set(re.findall(r"\.\./webfonts/([\w.-]+)", (fonts / "css/all.min.css").read_text()))
    assert named and all((fonts / "webfonts" / n).is_file() for n in named)  # what the style sheet loads
    known = {url for pkg in pkgs for url in pkg.files}
    assert {a or b for a, b in LOADS.findall(GX_HEAD)} - known == {
        "https://great-expectations-web-assets.s3.us-east-2.amazonaws.com/logo-long.png?d=20261127T1",
        "https://cdn.example.org/something-new.js",
    }


def test_localize_points_the_pages_at_the_sites_copies_and_removes_other_origins(tmp_path, caplog):
    site = tmp_path / "data_docs"
    deep = site / "validations" / "join_recall" / "r1"
    deep.mkdir(parents=True)
    for page in (site / "index.html", deep / "page.html"):
        page.write_text(GX_HEAD)
    assert docs_assets.localize(site) == 2
    for page in (site / "index.html", deep / "page.html"):
        text = page.read_text()
        addresses = [a or b for a, b in LOADS.findall(text)]
        assert len(addresses) == 7
        assert not [a for a in addresses if "//" in a]
        assert all((page.parent / a).resolve().is_file() for a in addresses)
        assert "integrity=" not in text
        assert 'href="https://greatexpectations.io"' in text  # a link is not a load
    # the unknown script is named once per page; the known logo goes without a warning
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 2 and all("something-new.js" in w for w in warned)
    assert docs_assets.localize(site) == 0  # nothing left to change


def test_a_package_whose_bytes_do_not_match_the_lock_is_refused(tmp_path, monkeypatch):
    lock = tmp_path / "assets.toml"
    lock.write_text(
        '[[package]]\nname = "left-pad"\nversion = "1.3.0"\n'
        'integrity = "sha512-AAAA"\nfiles = { "https://cdn/left-pad" = "index.js" }\n'
    )
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        data = b"module.exports = 1;"
        info = tarfile.TarInfo("package/index.js")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))

    class Response(io.BytesIO):
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(docs_assets.urllib.request, "urlopen", lambda url, timeout: Response(buf.getvalue()))
    with pytest.raises(ConfigError, match=r"left-pad@1\.3\.0 .* integrity sha512-"):
        docs_assets.fetch(tmp_path / "out", lock=lock)
    assert not (tmp_path / "out").exists()


def test_without_the_fetched_copies_the_pages_are_left_with_a_warning(tmp_path, caplog):
    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").write_text(GX_HEAD)
    assert docs_assets.localize(site, assets=tmp_path / "nothing") == 0
    assert (site / "index.html").read_text() == GX_HEAD
    assert "infra/setup.sh" in caplog.text
