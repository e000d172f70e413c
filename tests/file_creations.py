"""The files created in a folder, as the kernel reports them (inotify): a file that exists for a
millisecond is still seen, where polling the folder's listing misses it once the process that
writes it is fast enough (a 2.2 MB checkpoint's temporary file lived 10-50 ms)."""
import ctypes
import os
import select
import struct

_IN_CREATE = 0x100
_IN_NONBLOCK = os.O_NONBLOCK
_IN_CLOEXEC = os.O_CLOEXEC
_EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len; then the name
_libc = ctypes.CDLL(None, use_errno=True)


class FileCreations:
    """Names of the files created in `folder` from construction on, in order; a context manager."""

    def __init__(self, folder):
        self._fd = _libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if self._fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        if _libc.inotify_add_watch(self._fd, os.fsencode(folder), _IN_CREATE) < 0:
            error = ctypes.get_errno()
            os.close(self._fd)
            raise OSError(error, f"inotify_add_watch {folder}")
        self._names = []

    def next(self, timeout):
        """The next created file's name, or None if none was created within `timeout` seconds."""
        if not self._names and select.select([self._fd], [], [], timeout)[0]:
            events = os.read(self._fd, 65536)
            offset = 0
            while offset < len(events):
                _, _, _, length = _EVENT.unpack_from(events, offset)
                name = events[offset + _EVENT.size:offset + _EVENT.size + length]
                self._names.append(os.fsdecode(name.rstrip(b"\0")))
                offset += _EVENT.size + length
        return self._names.pop(0) if self._names else None

    def close(self):
        os.close(self._fd)

    def __enter__(self):
        return self

    def __exit__(self, *_):
        self.close()
