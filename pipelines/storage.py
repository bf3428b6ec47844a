# File access of the Beam path of pipelines.prepare through Apache Beam's FileSystems, so that
# inputs and output may live on gs://, s3://, hdfs:// (whatever file systems Beam has installed).
"""Paths of ``keras-transformer prepare --runner beam``: local or ``scheme://...`` alike.

Every function takes a path as a string (or ``os.PathLike`` for local paths) and goes through
``apache_beam.io.filesystems.FileSystems``: the driver's bookkeeping then works wherever Beam's
workers do (``gs://`` with ``apache-beam[gcp]``, ``s3://`` with ``[aws]``, ``hdfs://`` with
``hdfs``, or a plugin named by ``--beam_plugins``). Object stores have no folders: a "folder"
here is a prefix, removed by deleting the files under it (``remove_tree``), and only files are
renamed. Local paths keep the process pool's own code in the shared modules (``is_remote``
decides), so nothing imports Beam unless the Beam runner or a remote path asks for it.

Example::

    load_plugins("--beam_plugins=my_fs_module")     # the driver imports them as workers do
    write_bytes(join("gs://b/out", "x.json"), b"{}")
    size(join("gs://b/out", "x.json"))              # 2
"""

from __future__ import annotations

import importlib
import os
import re

__all__ = [
    "is_remote",
    "join",
    "load_plugins",
    "has_filesystem",
    "exists",
    "size",
    "open_read",
    "read_bytes",
    "open_write",
    "write_bytes",
    "rename",
    "delete",
    "glob",
    "mkdirs",
    "remove_tree",
    "upload_tree",
]

_SCHEME = re.compile(r"^[a-zA-Z][-a-zA-Z0-9+.]*://")


def is_remote(path) -> bool:
    """Whether ``path`` names a file system by scheme (``gs://...``) rather than a local path."""
    return isinstance(path, str) and bool(_SCHEME.match(path))


def _fs():
    from apache_beam.io.filesystems import FileSystems

    return FileSystems


def join(base, *parts: str):
    """``base/part/...``: a ``pathlib.Path`` for a local ``Path``, else the file system's join."""
    if not isinstance(base, str):
        return base.joinpath(*parts)
    return _fs().join(base, *parts) if is_remote(base) else os.path.join(base, *parts)


def load_plugins(beam_options: str | None) -> list:
    """Import the modules (or ``module.Class``) of ``--beam_plugins`` in this process, as Beam's
    workers do, so that the driver knows the same file systems; returns their names."""
    from apache_beam.options.pipeline_options import SetupOptions

    from pipelines.beam import pipeline_options

    names = []
    for entry in pipeline_options(beam_options, 1).view_as(SetupOptions).beam_plugins or []:
        names += [name.strip() for name in entry.split(",") if name.strip()]
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError:
            if "." not in name:
                raise
            importlib.import_module(name.rsplit(".", 1)[0])  # module.Class
    return names


def has_filesystem(path: str) -> bool:
    """Whether Beam has a file system for the scheme of ``path`` (installed or a plugin)."""
    try:
        _fs().get_filesystem(path)
    except ValueError:
        return False
    return True


def exists(path) -> bool:
    """Whether ``path`` is a file (object stores: an object; folders are not files there)."""
    return _fs().exists(os.fspath(path))


def size(path) -> int:
    """Size of a file in bytes."""
    return _fs().match([os.fspath(path)])[0].metadata_list[0].size_in_bytes


def open_read(path, *, decompress: bool = True):
    """A binary stream of ``path`` (``.gz`` decompressed unless ``decompress=False``)."""
    from apache_beam.io.filesystem import CompressionTypes

    kind = CompressionTypes.AUTO if decompress else CompressionTypes.UNCOMPRESSED
    return _fs().open(os.fspath(path), compression_type=kind)


def read_bytes(path) -> bytes:
    with open_read(path, decompress=False) as handle:
        return handle.read()


def write_bytes(path, data: bytes) -> None:
    """Write ``data`` to ``path`` as it is (no compression whatever the name)."""
    with open_write(path) as out:
        out.write(data)


def open_write(path):
    """A binary stream that writes ``path`` as it is (no compression whatever the name)."""
    from apache_beam.io.filesystem import CompressionTypes

    return _fs().create(os.fspath(path), compression_type=CompressionTypes.UNCOMPRESSED)


def rename(source, destination) -> None:
    """Move one file onto ``destination`` (replacing it); a rename on local disks and HDFS, a
    copy then delete on object stores (the destination appears whole or not at all)."""
    _fs().rename([os.fspath(source)], [os.fspath(destination)])


def delete(paths) -> None:
    paths = [os.fspath(path) for path in paths]
    if paths:
        _fs().delete(paths)


def glob(pattern) -> list:
    """Files matching ``pattern`` (``*`` stays within one folder, ``**`` crosses them)."""
    return sorted(m.path for m in _fs().match([os.fspath(pattern)])[0].metadata_list)


def mkdirs(path) -> None:
    """Create a folder (and its parents) if missing; nothing to do on object stores."""
    from apache_beam.io.filesystem import BeamIOError

    path = os.fspath(path)
    if _fs().get_filesystem(path).has_dirs() and not _fs().exists(path):
        try:
            _fs().mkdirs(path)
        except (BeamIOError, OSError):
            if not _fs().exists(path):  # not a race with another creator
                raise


def remove_tree(path) -> None:
    """Delete a folder and everything in it (object stores: every file under the prefix)."""
    path = os.fspath(path)
    filesystem = _fs().get_filesystem(path)
    if filesystem.has_dirs():
        if filesystem.exists(path):
            filesystem.delete([path])
        return
    delete(glob(join(path, "**")))


def upload_tree(local_dir, destination: str) -> list:
    """Copy every file under the local folder ``local_dir`` to ``destination`` (same relative
    names); returns the destination paths, in upload order."""
    written = []
    for folder, _, files in sorted(os.walk(local_dir)):
        for name in sorted(files):
            local = os.path.join(folder, name)
            relative = os.path.relpath(local, local_dir).split(os.sep)
            target = join(destination, *relative)
            with open(local, "rb") as handle:
                write_bytes(target, handle.read())
            written.append(target)
    return written
