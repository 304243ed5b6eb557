"""PyTorch's CUDA IPC tuples as JSON, both ways, for sharing memory with vram (a Node process).

PyTorch shares a CUDA tensor's storage as the 8-tuple `storage._share_cuda_()` returns and
rebuilds it with `torch.multiprocessing.reductions.rebuild_cuda_tensor`. Across a process
boundary this helper writes that tuple as JSON: the same eight fields in the same order, byte
strings as hex. vram reads it with `importIpc(JSON.parse(line))` and makes it with
`torchShareTuple(exportIpc(buffer), device)`.

As a library:
    from torch_ipc import share_json, rebuild
    line = json.dumps(share_json(tensor))                       # to vram
    t = rebuild(json.loads(line), torch.float32, (1024,))       # from vram

As a program (what vram's tests run):
    python3 torch_ipc.py share BYTES   prints the JSON of a uint8 tensor holding i % 251, waits for a
                                       line on stdin, then prints the hex of its first 16 bytes
    python3 torch_ipc.py rebuild       reads one JSON tuple from stdin, rebuilds a uint8 tensor over
                                       it, prints the hex of its first 8 bytes, fills it with 0xab,
                                       synchronises and prints "done"
"""
import json
import sys

import torch
from torch.multiprocessing.reductions import rebuild_cuda_tensor


def _hex(value):
    return None if value is None else bytes(value).hex()


def share_json(tensor):
    """The JSON form of `tensor`'s storage share tuple (byte strings as hex), and nothing else."""
    fields = tensor.untyped_storage()._share_cuda_()
    device, handle, size, offset, ref_name, ref_offset, event, sync = fields
    return [device, _hex(handle), size, offset, _hex(ref_name), ref_offset, _hex(event), sync]


def _torch_handle(handle_hex):
    """vram writes PyTorch's versioned 66-byte handle; a PyTorch from before versioned handles takes the driver's 64 bytes."""
    handle = bytes.fromhex(handle_hex)
    probe = torch.empty(1, dtype=torch.uint8, device="cuda").untyped_storage()._share_cuda_()[1]
    return handle if len(probe) == len(handle) else handle[-64:]


def rebuild(fields, dtype, shape):
    """A tensor of `dtype` and `shape` over the memory a JSON share tuple names (PyTorch's own rebuild)."""
    device, handle, size, offset, ref_name, ref_offset, event, sync = fields
    element = torch.empty((), dtype=dtype).element_size()
    count = 1
    for n in shape:
        count *= n
    if count * element > size:
        raise ValueError(f"{count} elements of {element} bytes do not fit in the {size} bytes shared")
    stride = []
    step = 1
    for n in reversed(shape):
        stride.insert(0, step)
        step *= n
    return rebuild_cuda_tensor(
        torch.Tensor, torch.Size(shape), tuple(stride), 0, torch.storage.UntypedStorage, dtype,
        device, _torch_handle(handle), size, offset, False,
        bytes.fromhex(ref_name or ""), ref_offset, bytes.fromhex(event or "00" * 64), bool(sync))


def main(argv):
    if argv[1] == "share":
        n = int(argv[2])
        # Allocated apart from a first tensor, so the storage sits at an offset inside PyTorch's cudaMalloc block.
        pad = torch.zeros(512, dtype=torch.uint8, device="cuda")
        t = (torch.arange(n, device="cuda") % 251).to(torch.uint8)
        torch.cuda.synchronize()
        print(json.dumps(share_json(t)), flush=True)
        sys.stdin.readline()
        print(bytes(t[:16].cpu().tolist()).hex(), flush=True)
        del pad
    elif argv[1] == "rebuild":
        fields = json.loads(sys.stdin.readline())
        t = rebuild(fields, torch.uint8, (fields[2],))
        print(bytes(t[:8].cpu().tolist()).hex(), flush=True)
        t.fill_(0xAB)
        torch.cuda.synchronize()
        print("done", flush=True)
    else:
        raise SystemExit(f"usage: {argv[0]} share BYTES | rebuild")


if __name__ == "__main__":
    main(sys.argv)
