"""Paths on remote file systems: a URL (``gs://``, ``s3://``, ``hdfs://``, ``ram://``) read through
``tf.io.gfile``, a local path through ``pathlib``, with the same few methods on both
(``as_path``), so that training reads a prepared folder in place wherever it lies. TensorFlow
loads when a URL is first read, not on import."""

from __future__ import annotations

import os
import pathlib
import re

__all__ = ["GFilePath", "as_path", "is_url"]

_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def is_url(path) -> bool:
    """Whether ``path`` names a file system by its scheme (``gs://b/p``, ``ram://p``)."""
    return isinstance(path, (str, os.PathLike)) and bool(_URL.match(str(os.fspath(path))))


def as_path(path):
    """``GFilePath`` for a URL, else ``pathlib.Path``: the same few methods on both."""
    return GFilePath(path) if is_url(path) else pathlib.Path(os.fspath(path))


class GFilePath:
    """A URL with the ``pathlib.Path`` methods the training input reads through, each one a
    ``tf.io.gfile`` call: it reads every file system registered with TensorFlow (``gs://``,
    ``ram://`` in memory; others by the package that registers them)."""

    def __init__(self, url):
        scheme, sep, rest = str(os.fspath(url)).partition("://")
        self._url = scheme + sep + rest.rstrip("/")

    def __fspath__(self) -> str:
        return self._url

    __str__ = __fspath__

    def __repr__(self) -> str:
        return f"GFilePath({self._url!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, GFilePath) and other._url == self._url

    def __hash__(self) -> int:
        return hash(self._url)

    def __truediv__(self, name) -> GFilePath:
        return GFilePath(f"{self._url}/{os.fspath(name)}")

    @property
    def name(self) -> str:
        return self._url.rpartition("/")[2]

    def _gfile(self, operation: str, *args):
        import tensorflow as tf

        try:
            return getattr(tf.io.gfile, operation)(*args)
        except tf.errors.UnimplementedError as error:  # "File system scheme 's3' not implemented"
            scheme = self._url.partition("://")[0]
            raise FileNotFoundError(
                f"{self._url}: no {scheme}:// file system is registered with TensorFlow in this "
                f"process ({error.message})"
            ) from None

    def is_absolute(self) -> bool:
        return True

    def exists(self) -> bool:
        return bool(self._gfile("exists", self._url))

    def is_dir(self) -> bool:
        return self.exists() and bool(self._gfile("isdir", self._url))

    def is_file(self) -> bool:
        return self.exists() and not self._gfile("isdir", self._url)

    def glob(self, pattern: str) -> list:
        return [GFilePath(name) for name in sorted(self._gfile("glob", f"{self._url}/{pattern}"))]

    def read_bytes(self) -> bytes:
        import tensorflow as tf

        with tf.io.gfile.GFile(self._url, "rb") as handle:
            return handle.read()

    def read_text(self, encoding: str = "utf-8") -> str:
        return self.read_bytes().decode(encoding)
