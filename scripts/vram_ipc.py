"""Opens a vram IPC handle of any kind from Python (ctypes over libcuda; PyTorch or CuPy only makes
the CUDA context current).

vram's `exportIpc(buffer).toString()` is `vram-ipc:` and hex. A legacy handle is 80 bytes (the
driver's 64, byte length, offset) and opens with cuIpcOpenMemHandle (`cupy.cuda.runtime.
ipcOpenMemHandle` does the same). A pool or physical handle names file descriptors the exporting
process keeps open: this helper copies them with pidfd_getfd (same user), then imports the pool
and the allocation (`pool`: cuMemPoolImportFromShareableHandle, cuMemPoolImportPointer) or maps the
physical allocations back to back (`physical`: cuMemImportFromShareableHandle, cuMemMap), as
vram's own `importIpc` does.

As a program (what vram's tests run):
    python3 vram_ipc.py HANDLE
        prints the hex of the first 8 bytes of the shared range, writes 0xab over its last 4
        bytes, synchronises, prints "done", and undoes the import.
"""
import ctypes
import os
import struct
import sys

try:
    import torch

    torch.zeros(1, device="cuda")  # makes the primary context current
except ImportError:
    import cupy

    cupy.zeros(1)

cuda = ctypes.CDLL("libcuda.so.1")
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

POSIX_FD = 1
DEVICE = 1
READWRITE = 3


class Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class AccessDesc(ctypes.Structure):
    _fields_ = [("location", Location), ("flags", ctypes.c_int)]


def check(result, call):
    if result != 0:
        raise RuntimeError(f"{call} failed: CUresult {result}")


def copy_descriptor(pid, fd):
    pidfd = libc.syscall(434, pid, 0)
    if pidfd < 0:
        raise OSError(ctypes.get_errno(), f"pidfd_open({pid})")
    try:
        mine = libc.syscall(438, pidfd, fd, 0)
        if mine < 0:
            raise OSError(ctypes.get_errno(), f"pidfd_getfd({pid}, {fd})")
        return mine
    finally:
        os.close(pidfd)


def open_handle(text):
    """(address of the shared range, its bytes, a function that undoes the import)."""
    data = bytes.fromhex(text.strip().removeprefix("vram-ipc:"))
    u64 = ctypes.c_uint64()
    if len(data) == 80:
        handle = (ctypes.c_char * 64).from_buffer_copy(data[:64])
        length, offset = struct.unpack_from("<QQ", data, 64)
        check(cuda.cuIpcOpenMemHandle_v2(ctypes.byref(u64), handle, 1), "cuIpcOpenMemHandle")
        base = u64.value
        return base + offset, length, lambda: check(cuda.cuIpcCloseMemHandle(ctypes.c_uint64(base)), "cuIpcCloseMemHandle")
    assert data[:3] == b"VRI", "not a vram handle"
    kind = data[3]
    pid, count, length, offset = struct.unpack_from("<IIQQ", data, 4)
    access = AccessDesc(Location(DEVICE, 0), READWRITE)
    if kind == 1:  # pool
        fd, _inode = struct.unpack_from("<II", data, 28)
        export = (ctypes.c_ubyte * 64).from_buffer_copy(data[36:100])
        mine = copy_descriptor(pid, fd)
        pool = ctypes.c_uint64()
        try:
            check(cuda.cuMemPoolImportFromShareableHandle(ctypes.byref(pool), ctypes.c_void_p(mine), POSIX_FD, ctypes.c_uint64(0)),
                  "cuMemPoolImportFromShareableHandle")
        finally:
            os.close(mine)
        flags = ctypes.c_int()
        check(cuda.cuMemPoolGetAccess(ctypes.byref(flags), pool, ctypes.byref(access.location)), "cuMemPoolGetAccess")
        if flags.value != READWRITE:
            check(cuda.cuMemPoolSetAccess(pool, ctypes.byref(access), ctypes.c_size_t(1)), "cuMemPoolSetAccess")
        check(cuda.cuMemPoolImportPointer(ctypes.byref(u64), pool, export), "cuMemPoolImportPointer")
        ptr = u64.value

        def undo():
            check(cuda.cuMemFree_v2(ctypes.c_uint64(ptr)), "cuMemFree")
            check(cuda.cuMemPoolDestroy(pool), "cuMemPoolDestroy")
        return ptr + offset, length, undo
    # physical: each allocation mapped back to back in a range reserved here
    extents = [struct.unpack_from("<IIQ", data, 28 + 16 * i) for i in range(count)]
    total = sum(size for _, _, size in extents)
    check(cuda.cuMemAddressReserve(ctypes.byref(u64), ctypes.c_size_t(total), ctypes.c_size_t(0), ctypes.c_uint64(0), ctypes.c_uint64(0)),
          "cuMemAddressReserve")
    base = u64.value
    at = 0
    for fd, _, size in extents:
        mine = copy_descriptor(pid, fd)
        physical = ctypes.c_uint64()
        try:
            check(cuda.cuMemImportFromShareableHandle(ctypes.byref(physical), ctypes.c_void_p(mine), POSIX_FD), "cuMemImportFromShareableHandle")
        finally:
            os.close(mine)
        check(cuda.cuMemMap(ctypes.c_uint64(base + at), ctypes.c_size_t(size), ctypes.c_size_t(0), physical, ctypes.c_uint64(0)), "cuMemMap")
        check(cuda.cuMemRelease(physical), "cuMemRelease")
        at += size
    check(cuda.cuMemSetAccess(ctypes.c_uint64(base), ctypes.c_size_t(total), ctypes.byref(access), ctypes.c_size_t(1)), "cuMemSetAccess")

    def undo():
        check(cuda.cuMemUnmap(ctypes.c_uint64(base), ctypes.c_size_t(total)), "cuMemUnmap")
        check(cuda.cuMemAddressFree(ctypes.c_uint64(base), ctypes.c_size_t(total)), "cuMemAddressFree")
    return base + offset, length, undo


def main(argv):
    ptr, length, undo = open_handle(argv[1])
    out = (ctypes.c_ubyte * 8)()
    check(cuda.cuMemcpyDtoH_v2(out, ctypes.c_uint64(ptr), ctypes.c_size_t(8)), "cuMemcpyDtoH")
    print(bytes(out).hex(), flush=True)
    mark = (ctypes.c_ubyte * 4)(0xAB, 0xAB, 0xAB, 0xAB)
    check(cuda.cuMemcpyHtoD_v2(ctypes.c_uint64(ptr + length - 4), mark, ctypes.c_size_t(4)), "cuMemcpyHtoD")
    check(cuda.cuCtxSynchronize(), "cuCtxSynchronize")
    undo()
    print("done", flush=True)


if __name__ == "__main__":
    main(sys.argv)
