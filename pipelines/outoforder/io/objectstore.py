"""The S3-compatible object store (MinIO by default) outside the lake: buckets, landing zone, publishing.

The lake itself is reached by Spark through s3a (:meth:`outoforder.config.Settings.spark_conf`);
this module is the driver-side client (the ``minio`` SDK) for everything else:

* :func:`ensure_buckets` creates the buckets a deployment needs, and :func:`grant_pipeline` the
  pipeline's own user, allowed those buckets and nothing else (the root user stays the operator's);
* the landing zone: raw files dropped under ``storage.landing_uri`` as
  ``<reader>/<source id>/<file name>`` are listed (:func:`pending`), read by ingest's Spark tasks
  (:mod:`outoforder.io.files`), and after their ingest moved under ``ingested/`` (or, when they
  cannot be ingested, under ``rejected/`` with a ``.reason.txt`` object beside them), so each is
  ingested once and none is lost;
* :func:`publish` uploads a folder (the quality report, Data Docs) under a URI.
"""

from __future__ import annotations

import functools
import mimetypes
from collections.abc import Iterable
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from outoforder.config import StorageSettings
from outoforder.errors import ConfigError, InputError

if TYPE_CHECKING:
    from minio import Minio

INCOMING, INGESTED, REJECTED = "incoming", "ingested", "rejected"


def split_uri(uri: str) -> tuple[str, str]:
    """``s3a://bucket/some/prefix`` -> ``("bucket", "some/prefix")`` (s3:// and s3a:// alike).

    >>> split_uri("s3a://landing/zone/")
    ('landing', 'zone')
    """
    parsed = urlparse(uri)
    if parsed.scheme not in ("s3", "s3a") or not parsed.netloc:
        msg = f"expected s3a://bucket[/prefix], got {uri!r}"
        raise ConfigError(msg)
    return parsed.netloc, parsed.path.strip("/")


@functools.cache
def client(storage: StorageSettings) -> Minio:
    """The client for the configured endpoint, one per settings (fails clearly without credentials)."""
    from minio import Minio

    endpoint = urlparse(storage.endpoint)
    if not endpoint.hostname:
        msg = f"storage.endpoint must be http(s)://host:port, got {storage.endpoint!r}"
        raise ConfigError(msg)
    storage.require_credentials()
    return Minio(
        endpoint.netloc,
        access_key=storage.access_key,
        secret_key=storage.secret_key,
        secure=endpoint.scheme == "https",
        region=storage.region,
    )


def ensure_buckets(storage: StorageSettings, names: Iterable[str]) -> list[str]:
    """Create the buckets that do not exist yet; return the ones created."""
    mc = client(storage)
    created = []
    for name in names:
        if not mc.bucket_exists(name):
            mc.make_bucket(name)
            created.append(name)
    return created


PIPELINE_POLICY = "outoforder-pipeline"


def pipeline_policy(buckets: Iterable[str]) -> dict[str, object]:
    """What the pipeline's user may do: read, write and list the named buckets' objects, nothing else.

    >>> pipeline_policy(["lake"])["Statement"][1]["Resource"]
    ['arn:aws:s3:::lake/*']
    """
    names = sorted(buckets)
    return {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Action": ["s3:ListBucket", "s3:GetBucketLocation",
                                           "s3:ListBucketMultipartUploads"],
             "Resource": [f"arn:aws:s3:::{b}" for b in names]},
            {"Effect": "Allow", "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject",
                                           "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"],
             "Resource": [f"arn:aws:s3:::{b}/*" for b in names]},
        ],
    }  # fmt: skip


def grant_pipeline(
    storage: StorageSettings, access_key: str, secret_key: str, buckets: Iterable[str]
) -> None:
    """Create (or update) the pipeline's user with :func:`pipeline_policy`; ``storage`` holds the root keys.

    Idempotent: a second call sets the same secret and policy again.
    """
    import json

    from minio import MinioAdmin
    from minio.credentials.providers import StaticProvider

    storage.require_credentials()
    if not access_key or not secret_key:
        msg = "the pipeline's user needs an access key and a secret key"
        raise ConfigError(msg)
    endpoint = urlparse(storage.endpoint)
    admin = MinioAdmin(
        endpoint=endpoint.netloc,
        credentials=StaticProvider(storage.access_key, storage.secret_key),
        region=storage.region,
        secure=endpoint.scheme == "https",
    )
    admin.policy_add(PIPELINE_POLICY, policy=pipeline_policy(buckets))
    admin.user_add(access_key, secret_key)
    attached = json.loads(admin.user_info(access_key)).get("policyName", "")
    if PIPELINE_POLICY not in attached.split(","):
        admin.attach_policy([PIPELINE_POLICY], user=access_key)


def _key(*parts: str) -> str:
    return "/".join(p.strip("/") for p in parts if p.strip("/"))


@dataclass(frozen=True)
class LandingFile:
    """One object waiting in the landing zone."""

    bucket: str
    key: str  # <prefix>/incoming/<reader>/<source id>/<name>
    relative: str  # <reader>/<source id>/<name>
    size: int

    @property
    def uri(self) -> str:
        """Where the object is, as an s3a URI (recorded as the file's path in the ingest log)."""
        return f"s3a://{self.bucket}/{self.key}"

    def parts(self) -> tuple[str, str, str]:
        """``(reader, source, name)``; fails with :class:`InputError` on a key of the wrong shape."""
        pieces = self.relative.split("/")
        if len(pieces) < 3:
            msg = (
                f"{self.uri}: landing files go under <reader>/<source id>/<file name> "
                f"(e.g. incoming/ooo/ooo/my_file.csv)"
            )
            raise InputError(msg)
        return pieces[0], "/".join(pieces[1:-1]), pieces[-1]


def pending(storage: StorageSettings) -> list[LandingFile]:
    """Every object under ``<landing_uri>/incoming/``, oldest key first."""
    bucket, prefix = split_uri(storage.landing_uri)
    root = _key(prefix, INCOMING) + "/"
    mc = client(storage)
    found = [
        LandingFile(bucket, str(o.object_name), str(o.object_name)[len(root) :], int(o.size or 0))
        for o in mc.list_objects(bucket, prefix=root, recursive=True)
        if not o.is_dir
    ]
    return sorted(found, key=lambda f: f.key)


def _move(storage: StorageSettings, item: LandingFile, to: str) -> str:
    from minio.commonconfig import CopySource

    _, prefix = split_uri(storage.landing_uri)
    new_key = _key(prefix, to, item.relative)
    mc = client(storage)
    # copy first, delete last: a crash in between leaves the file in both places, never in none
    mc.copy_object(item.bucket, new_key, CopySource(item.bucket, item.key))
    mc.remove_object(item.bucket, item.key)
    return f"s3a://{item.bucket}/{new_key}"


def mark_ingested(storage: StorageSettings, item: LandingFile) -> str:
    """Move an ingested object under ``ingested/``; return its new URI."""
    return _move(storage, item, INGESTED)


def reject(storage: StorageSettings, item: LandingFile, reason: str) -> str:
    """Move an object that cannot be ingested under ``rejected/`` with a ``.reason.txt`` beside it."""
    uri = _move(storage, item, REJECTED)
    _, prefix = split_uri(storage.landing_uri)
    note = reason.encode()
    key = _key(prefix, REJECTED, item.relative) + ".reason.txt"
    client(storage).put_object(item.bucket, key, BytesIO(note), len(note), content_type="text/plain")
    return uri


def put_file(storage: StorageSettings, uri: str, path: Path) -> None:
    """Upload one local file to ``uri`` (used to drop files into the landing zone)."""
    bucket, key = split_uri(uri)
    ctype = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    client(storage).fput_object(bucket, key, str(path), content_type=ctype)


def publish(storage: StorageSettings, folder: Path, uri: str) -> int:
    """Upload every file under ``folder`` to ``uri`` (keys relative to the folder); return the count.

    Content types are set from the file names, so the HTML pages open in a browser from a bucket
    served as a website.
    """
    if not folder.is_dir():
        msg = f"nothing to publish: {folder} is not a folder"
        raise InputError(msg)
    bucket, prefix = split_uri(uri)
    mc = client(storage)
    n = 0
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        ctype = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        mc.fput_object(
            bucket, _key(prefix, path.relative_to(folder).as_posix()), str(path), content_type=ctype
        )
        n += 1
    return n
