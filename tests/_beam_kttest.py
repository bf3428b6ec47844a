"""A test-only Apache Beam file system for the made-up scheme ``kttest://``, stored in the folder
named by ``KT_TEST_FS_ROOT``: ``kttest://a/b`` is ``$KT_TEST_FS_ROOT/a/b``.

It behaves like an object store (GCS, S3), the case a driver that only knows local paths gets
wrong: no folders (``has_dirs`` is False, ``mkdirs`` does nothing, ``exists`` is True for files
only, a folder's files are deleted one by one or by a ``prefix/`` path), renames of files only.
Beam finds it by ``scheme()`` once this module is imported: ``prepare --runner beam
--beam-options="--beam_plugins=tests._beam_kttest"`` imports it in the driver and in every worker.
"""

import os

from apache_beam.io.filesystem import BeamIOError, FileMetadata, FileSystem
from apache_beam.io.localfilesystem import LocalFileSystem

SCHEME = "kttest"
PREFIX = SCHEME + "://"


def _root() -> str:
    return os.environ["KT_TEST_FS_ROOT"]


def local_path(url: str) -> str:
    """The backing file of a ``kttest://`` path."""
    if not url.startswith(PREFIX):
        raise ValueError(f"not a {PREFIX} path: {url}")
    return os.path.join(_root(), url[len(PREFIX) :])


def _url(local: str) -> str:
    return PREFIX + os.path.relpath(local, _root()).replace(os.sep, "/")


def _prune(local: str) -> None:
    """Remove the backing folders left empty (an object store has none)."""
    folder = os.path.dirname(local)
    while folder != _root() and os.path.isdir(folder) and not os.listdir(folder):
        try:
            os.rmdir(folder)
        except OSError:  # Beam renames in a thread pool: another rename pruned it (or refilled it)
            return
        folder = os.path.dirname(folder)


class KtTestFileSystem(FileSystem):
    """``kttest://`` paths as objects in a local folder (see the module docstring)."""

    def __init__(self, pipeline_options):
        super().__init__(pipeline_options)
        self._local = LocalFileSystem(pipeline_options)

    @classmethod
    def scheme(cls):
        return SCHEME

    def join(self, basepath, *paths):
        return "/".join([basepath.rstrip("/"), *(p.strip("/") for p in paths)])

    def split(self, path):
        head, _, tail = path.rpartition("/")
        return head, tail

    def mkdirs(self, path):
        pass

    def has_dirs(self):
        return False

    def _list(self, dir_or_prefix):
        for folder, _, files in os.walk(_root()):
            for name in files:
                local = os.path.join(folder, name)
                url = _url(local)
                if url.startswith(dir_or_prefix):
                    yield FileMetadata(url, os.path.getsize(local), os.path.getmtime(local))

    def create(self, path, mime_type="application/octet-stream", compression_type="auto"):
        os.makedirs(os.path.dirname(local_path(path)), exist_ok=True)
        return self._local.create(local_path(path), mime_type, compression_type)

    def open(self, path, mime_type="application/octet-stream", compression_type="auto"):
        if not os.path.isfile(local_path(path)):
            raise BeamIOError("Open failed", {path: FileNotFoundError(path)})
        return self._local.open(local_path(path), mime_type, compression_type)

    def copy(self, source_file_names, destination_file_names):
        for source, destination in zip(source_file_names, destination_file_names, strict=True):
            with self.open(source, compression_type="uncompressed") as handle:
                data = handle.read()
            with self.create(destination, compression_type="uncompressed") as out:
                out.write(data)

    def rename(self, source_file_names, destination_file_names):
        errors = {}
        for source, destination in zip(source_file_names, destination_file_names, strict=True):
            if not os.path.isfile(local_path(source)):  # object stores rename objects only
                errors[(source, destination)] = FileNotFoundError(source)
                continue
            os.makedirs(os.path.dirname(local_path(destination)), exist_ok=True)
            os.replace(local_path(source), local_path(destination))
            _prune(local_path(source))
        if errors:
            raise BeamIOError("Rename operation failed", errors)

    def exists(self, path):
        return os.path.isfile(local_path(path))

    def size(self, path):
        return os.path.getsize(local_path(path))

    def last_updated(self, path):
        return os.path.getmtime(local_path(path))

    def checksum(self, path):
        return str(self.size(path))

    def metadata(self, path):
        if not self.exists(path):
            raise BeamIOError("Metadata operation failed", {path: FileNotFoundError(path)})
        return FileMetadata(path, self.size(path), self.last_updated(path))

    def delete(self, paths):
        errors = {}
        for path in paths:
            if path.endswith("/"):  # a prefix: every object under it
                targets = [m.path for m in self._list(path)]
            elif self.exists(path):
                targets = [path]
            else:
                errors[path] = FileNotFoundError(path)
                continue
            for target in targets:
                os.remove(local_path(target))
                _prune(local_path(target))
        if errors:
            raise BeamIOError("Delete operation failed", errors)
