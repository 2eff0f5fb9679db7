"""Where a dataset lives: a URI (local path, file://, s3://, gs://, abfs://, hdfs://, dbfs:/, /Volumes/...)
resolved to a pyarrow filesystem and a path on it, with fsspec behind pyarrow for schemes it lacks.

Credentials and endpoints come from `storage_options` (keyword arguments of the pyarrow filesystem) or, as
the cloud SDKs do, from the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION,
AWS_ENDPOINT_URL, GOOGLE_APPLICATION_CREDENTIALS, ...).
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from sparkrunner.errors import InvalidArgumentError

S3_SCHEMES = ("s3", "s3a", "s3n")
GCS_SCHEMES = ("gs", "gcs")
AZURE_SCHEMES = ("abfs", "abfss", "az")
HDFS_SCHEMES = ("hdfs", "viewfs")
DBFS_MOUNT = "/dbfs"
# Unity Catalog Volumes are mounted at /Volumes on Databricks; dbfs:/Volumes/... names the same files.
VOLUMES_ROOT = "/Volumes"


@dataclass(frozen=True)
class Location:
    """A resolved URI: `path` on `filesystem`, and `uri`, the name users and other machines know it by."""

    uri: str
    path: str
    filesystem: Any  # pyarrow.fs.FileSystem

    @property
    def is_local(self) -> bool:
        """True for the machine's own filesystem (a local disk, or a mount such as /dbfs that may be shared)."""
        return type(self.filesystem).__name__ == "LocalFileSystem"

    def child(self, name: str) -> Location:
        return Location(_join(self.uri, name), posixpath.join(self.path, name), self.filesystem)


def resolve(uri: str | os.PathLike[str], storage_options: Mapping[str, Any] | None = None) -> Location:
    """The filesystem and path that `uri` names; InvalidArgumentError for a scheme nothing here can open."""
    text = os.fspath(uri)
    options = dict(storage_options or {})
    scheme = scheme_of(text)
    if scheme in ("", "file"):
        return _local(local_path(text), options)
    if scheme == "dbfs":
        return _local(_dbfs_path(text), options)
    parts = urlsplit(text)
    if scheme in S3_SCHEMES:
        return Location(text, _bucket_path(parts), _s3(options))
    if scheme in GCS_SCHEMES:
        return Location(text, _bucket_path(parts), _pyarrow_fs("GcsFileSystem", options, text))
    if scheme in AZURE_SCHEMES:
        return _azure(text, parts, options)
    if scheme in HDFS_SCHEMES:
        return _hdfs(text, parts, options)
    return _fsspec(text, scheme, options)


def scheme_of(text: str) -> str:
    """The URI scheme of `text` in lower case ("file", "s3", ...), or "" for a plain path."""
    return urlsplit(text).scheme.lower() if "://" in text or text.startswith(("file:", "dbfs:")) else ""


def _local(path: str, options: dict[str, Any]) -> Location:
    import pyarrow.fs as pafs

    if options:
        raise InvalidArgumentError(
            f"storage_options {sorted(options)} were given for the local path {path}, which takes none"
        )
    return Location(path, path, pafs.LocalFileSystem())


def local_path(text: str) -> str:
    """The absolute path that a plain path or a file: URI names on this machine."""
    if text.startswith("file:"):
        text = "/" + urlsplit(text).path.lstrip("/")
    return os.path.abspath(os.path.expanduser(text))


def _dbfs_path(text: str) -> str:
    """dbfs:/Volumes/... -> /Volumes/..., any other dbfs:/x -> /dbfs/x (Databricks' FUSE mounts)."""
    inner = "/" + text[len("dbfs:") :].lstrip("/")
    path = inner if inner.startswith(VOLUMES_ROOT + "/") else DBFS_MOUNT + inner
    mount = VOLUMES_ROOT if inner.startswith(VOLUMES_ROOT + "/") else DBFS_MOUNT
    if not os.path.isdir(mount):
        raise InvalidArgumentError(
            f"{text} is read through Databricks' {mount} mount, which this machine does not have: on Databricks "
            f"it is there; elsewhere use an object-store URI such as s3://bucket/prefix"
        )
    return path


def _bucket_path(parts: Any) -> str:
    return (parts.netloc + parts.path).rstrip("/")


def _s3(options: dict[str, Any]) -> Any:
    """pyarrow's S3 filesystem; an AWS_ENDPOINT_URL (a local S3-API server, MinIO...) is honoured explicitly."""
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint and "endpoint_override" not in options:
        parsed = urlsplit(endpoint if "://" in endpoint else "https://" + endpoint)
        options = {"endpoint_override": parsed.netloc, "scheme": parsed.scheme, **options}
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if region and "region" not in options:
        options["region"] = region
    return _pyarrow_fs("S3FileSystem", options, "s3://")


def _azure(text: str, parts: Any, options: dict[str, Any]) -> Location:
    """abfs[s]://container@account.dfs.core.windows.net/path -> container/path on that account."""
    container, _, host = parts.netloc.partition("@")
    account = host.split(".", 1)[0] if host else options.get("account_name", "")
    path = (container + parts.path).rstrip("/")
    import pyarrow.fs as pafs

    if hasattr(pafs, "AzureFileSystem"):
        return Location(
            text, path, _pyarrow_fs("AzureFileSystem", {"account_name": account, **options}, text)
        )
    return Location(text, path, _fsspec_filesystem("abfs", {"account_name": account, **options}, text))


def _hdfs(text: str, parts: Any, options: dict[str, Any]) -> Location:
    options = {"host": parts.hostname or "default", "port": parts.port or 0, **options}
    return Location(text, parts.path.rstrip("/") or "/", _pyarrow_fs("HadoopFileSystem", options, text))


def _fsspec(text: str, scheme: str, options: dict[str, Any]) -> Location:
    filesystem = _fsspec_filesystem(scheme, options, text)
    return Location(text, filesystem.handler.fs._strip_protocol(text), filesystem)


def _pyarrow_fs(name: str, options: dict[str, Any], uri: str) -> Any:
    import pyarrow.fs as pafs

    try:
        return getattr(pafs, name)(**options)
    except TypeError as error:
        raise InvalidArgumentError(
            f"storage_options for {uri} are keyword arguments of pyarrow.fs.{name}: {error}"
        ) from error


def _fsspec_filesystem(scheme: str, options: dict[str, Any], uri: str) -> Any:
    """A pyarrow filesystem over fsspec's implementation of `scheme` (when its package is installed)."""
    import pyarrow.fs as pafs

    try:
        import fsspec

        filesystem = fsspec.filesystem(scheme, **options)
    except (ImportError, ValueError) as error:
        raise InvalidArgumentError(
            f"nothing here can open {uri}: pyarrow has no filesystem for {scheme}:// and fsspec says: {error}. "
            "Supported: local paths, file://, s3://, s3a://, gs://, abfs(s)://, hdfs://, dbfs:/, /Volumes/..."
        ) from error
    return pafs.PyFileSystem(pafs.FSSpecHandler(filesystem))


def _join(uri: str, name: str) -> str:
    return uri.rstrip("/") + "/" + name


def file_identities(uris: list[str]) -> list[list[Any]] | None:
    """Each file's URI, size, modification time and (on object stores) ETag, so that a rewritten input misses
    the cache; None when any cannot be looked at, since then nothing proves the data unchanged."""
    import pyarrow as pa
    import pyarrow.fs as pafs

    identities = []
    for uri in uris:
        try:
            location = resolve(uri)
            info = location.filesystem.get_file_info(location.path)
            if info.type != pafs.FileType.File or info.mtime_ns is None:
                return None
            identity = [uri, info.size, info.mtime_ns]
            if (
                not location.is_local
            ):  # object stores keep mtimes to the second: the ETag tells rewrites apart
                identity.append(_etag(location))
        except (OSError, ValueError, ImportError, pa.ArrowException):
            return None
        identities.append(identity)
    return identities


def _etag(location: Location) -> str:
    """The object's ETag (pyarrow gives it among the metadata of an opened S3/GCS file), or ""."""
    with location.filesystem.open_input_file(location.path) as opened:
        metadata = {_text(key): value for key, value in dict(opened.metadata() or {}).items()}
    return _text(metadata.get("ETag", ""))


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value
