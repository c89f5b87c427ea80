"""Data Docs without third-party origins: the files its pages load from CDNs, served by the site itself.

Great Expectations' Data Docs pages load jQuery, Bootstrap, vega and others from public CDNs, some
at floating versions (``vega@5``) and most without integrity hashes; served under Airflow's own
origin, any of those hosts could run script with a logged-in user's session. ``infra/datadocs/
assets.toml`` pins each of them to one release on the npm registry with its integrity hash;
:func:`fetch` (run by ``infra/setup.sh``) downloads them once, checks the hash and keeps the files
the pages need; :func:`localize` copies them into the site (``static/vendor/``) and points the
pages of the site at those copies. A tag that still names another origin (a new Great Expectations
release adding a CDN file, say) is removed with a warning: the reports app's Content-Security-Policy
would block it anyway.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import io
import logging
import os
import re
import shutil
import sys
import tarfile
import time
import tomllib
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from outoforder.config import REPO_ROOT
from outoforder.errors import ConfigError

log = logging.getLogger(__name__)

LOCK = REPO_ROOT / "infra" / "datadocs" / "assets.toml"
VENDOR = Path("static") / "vendor"  # inside the Data Docs site
REGISTRY = "https://registry.npmjs.org"

# tags that load something: scripts, style sheets, images (links to other pages are navigation)
_LOADING_TAG = re.compile(
    r"<(?:script|img)\b[^>]*?\bsrc=\"(?P<src>[^\"]+)\"[^>]*>(?:\s*</script>)?"
    r"|<link\b[^>]*?\bhref=\"(?P<href>[^\"]+)\"[^>]*>",
    re.IGNORECASE,
)
_EXTERNAL = re.compile(r"^(?:https?:)?//", re.IGNORECASE)
_SRI = re.compile(r"\s(?:integrity|crossorigin)=\"[^\"]*\"", re.IGNORECASE)


@dataclass(frozen=True)
class Package:
    """One pinned npm package: the files of it that the pages load, by the address they use."""

    name: str
    version: str
    integrity: str  # the registry's "sha512-<base64>" of the package's tarball
    files: Mapping[str, str]  # the pages' address -> the file's path in the package
    also: tuple[str, ...] = ()  # folders the files refer to (a style sheet's fonts)

    @property
    def folder(self) -> Path:
        """Where its files go, under the assets folder and under the site's ``static/vendor``."""
        return Path(f"{self.name}@{self.version}")

    @property
    def tarball(self) -> str:
        """Its tarball's path on the registry."""
        return f"{self.name}/-/{self.name.rsplit('/', 1)[-1]}-{self.version}.tgz"


def packages(lock: Path = LOCK) -> list[Package]:
    """The pinned packages of the lock file."""
    data = _read(lock)
    return [
        Package(p["name"], p["version"], p["integrity"], dict(p["files"]), tuple(p.get("also", ())))
        for p in data["package"]
    ]


def dropped(lock: Path = LOCK) -> tuple[str, ...]:
    """Addresses (prefixes) the pages load that are removed without a copy or a warning."""
    return tuple(_read(lock).get("drop", ()))


@functools.cache
def _read(lock: Path) -> dict[str, Any]:
    """The lock file, read once per process (every Data Docs build consults it)."""
    return tomllib.loads(lock.read_text())


def assets_dir(lock: Path = LOCK) -> Path:
    """The machine's cache of the fetched files, keyed by the lock file's content (as infra/env.sh keys)."""
    home = Path(os.environ.get("OOO_HOME", Path.home() / ".cache" / "outoforder"))
    digest = hashlib.sha256(lock.read_bytes()).hexdigest()[:12]
    return Path(os.environ.get("OOO_DOCS_ASSETS_DIR", home / f"datadocs-{digest}"))


def fetch(dest: Path, registry: str = REGISTRY, lock: Path = LOCK) -> int:
    """Download every pinned package, check its integrity, keep its listed files under ``dest``.

    Idempotent: a complete ``dest`` (its ``.complete`` marker) is kept. Returns the files kept.
    """
    if (dest / ".complete").exists():
        return sum(1 for p in dest.rglob("*") if p.is_file()) - 1
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    kept = 0
    for pkg in packages(lock):
        url = f"{registry.rstrip('/')}/{pkg.tarball}"
        with urllib.request.urlopen(url, timeout=120) as resp:
            data = resp.read()
        algo, _, want = pkg.integrity.partition("-")
        got = base64.b64encode(hashlib.new(algo, data).digest()).decode()
        if got != want:
            msg = (
                f"{pkg.name}@{pkg.version} from {url}: integrity {algo}-{got}, the lock says {pkg.integrity}"
            )
            raise ConfigError(msg)
        wanted = set(pkg.files.values())
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            for member in tar.getmembers():
                inner = member.name.split("/", 1)[-1]  # npm tarballs put everything under package/
                if member.isfile() and (inner in wanted or inner.startswith(pkg.also)):
                    out = tmp / pkg.folder / inner
                    out.parent.mkdir(parents=True, exist_ok=True)
                    source = tar.extractfile(member)
                    assert source is not None
                    out.write_bytes(source.read())
                    kept += 1
                    wanted.discard(inner)
        if wanted:
            msg = f"{pkg.name}@{pkg.version} has no {sorted(wanted)}: fix {lock}"
            raise ConfigError(msg)
    (tmp / ".complete").write_text("")
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    return kept


def rewrite(html: str, local: Mapping[str, str]) -> tuple[str, list[str]]:
    """The page with every loading tag of ``local``'s addresses pointed at its copy.

    Returns the page and the other-origin addresses it removed (tags ``local`` does not know).

    >>> page = '<script src="https://cdn.x/vega@5" integrity="sha384-a" crossorigin="anonymous"></script>'
    >>> rewrite(page + '<img src="https://logo.png">', {"https://cdn.x/vega@5": "static/vendor/vega.js"})
    ('<script src="static/vendor/vega.js"></script>', ['https://logo.png'])
    >>> rewrite('<a href="https://greatexpectations.io">GX</a>', {})  # a link, not a load
    ('<a href="https://greatexpectations.io">GX</a>', [])
    """
    removed: list[str] = []

    def one(m: re.Match[str]) -> str:
        address = m.group("src") or m.group("href")
        tag = m.group(0)
        if not _EXTERNAL.match(address):
            return tag
        if tag.lower().startswith("<link") and not re.search(r"rel=\"?stylesheet", tag, re.IGNORECASE):
            return tag  # not a style sheet (an icon, say): the policy decides what it may load
        bare = address.split("?", 1)[0]
        if bare in local:
            # the copy was checked against the lock's hash when fetched; the CDN's own hash is of
            # the CDN's bytes, not necessarily the package's
            return _SRI.sub("", tag.replace(address, local[bare]))
        removed.append(address)
        return ""

    return _LOADING_TAG.sub(one, html), removed


def localize(site: Path, since: float = 0.0, assets: Path | None = None, lock: Path = LOCK) -> int:
    """Point the site's pages written since ``since`` (epoch s) at local copies; returns pages changed.

    The copies go to ``<site>/static/vendor`` (once per package version). Without the fetched files
    (``infra/setup.sh`` not run, say) the pages are left as they are, with a warning: their
    scripts and styles will not load under the reports app's policy.
    """
    assets = assets or assets_dir(lock)
    if not (assets / ".complete").exists():
        log.warning(
            "Data Docs: no local copies of its scripts in %s (run infra/setup.sh); "
            "pages keep their CDN addresses",
            assets,
        )
        return 0
    pkgs = packages(lock)
    expected = dropped(lock)
    vendor = site / VENDOR
    for pkg in pkgs:
        if not (vendor / pkg.folder).is_dir():
            shutil.copytree(assets / pkg.folder, vendor / pkg.folder, dirs_exist_ok=True)
    # each address's copy, relative to static/vendor; a page adds its own way there
    copies = {url: f"{pkg.folder.as_posix()}/{path}" for pkg in pkgs for url, path in pkg.files.items()}
    changed = 0
    for page in site.rglob("*.html"):
        if page.stat().st_mtime < since or vendor in page.parents:
            continue
        to_vendor = Path(os.path.relpath(vendor, page.parent)).as_posix()
        local = {url: f"{to_vendor}/{copy}" for url, copy in copies.items()}
        text = page.read_text()
        new, removed = rewrite(text, local)
        for address in sorted({a for a in removed if not a.startswith(expected)}):
            log.warning("Data Docs: %s loads %s, which has no local copy: removed", page.name, address)
        if new != text:
            page.write_text(new)
            changed += 1
    return changed


def main(argv: list[str] | None = None) -> int:
    """``python -m outoforder.quality.docs_assets fetch``: what infra/setup.sh runs."""
    args = sys.argv[1:] if argv is None else argv
    if args != ["fetch"]:
        print("usage: python -m outoforder.quality.docs_assets fetch", file=sys.stderr)
        return 64
    dest = assets_dir()
    t0 = time.monotonic()
    n = fetch(dest, os.environ.get("OOO_NPM_REGISTRY", REGISTRY))
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    log.info("[setup] Data Docs assets ready: %d files in %s (%.0f s)", n, dest, time.monotonic() - t0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
