"""numpy in place of cupy, so that DeepSpeed 0.19.6's 1-bit optimizers run on a CPU
(tests/bench/ds_onebit_peers.sh). Their NcclBackend uses cupy only to view tensors (DLPack), pack
and unpack sign bits and split the packed array: numpy's packbits, unpackbits and split are the
same functions on the host. Nothing here computes anything DeepSpeed's code does not."""
import numpy as np
import torch.utils.dlpack

packbits, unpackbits, split, zeros = np.packbits, np.unpackbits, np.split, np.zeros


def from_dlpack(capsule):
    """A torch DLPack capsule as a numpy array over the same memory."""
    return torch.utils.dlpack.from_dlpack(capsule).numpy()


class _Stream:
    def synchronize(self):
        pass


class cuda:  # noqa: N801 (cupy's module name)
    class Device:
        def __init__(self, index):
            pass

        def use(self):
            pass

    @staticmethod
    def get_current_stream():
        return _Stream()
