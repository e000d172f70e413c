"""torchrun (torch.distributed.run), with its command line, as Debian's python3-torch can run it.
Debian's torch 2.x is built without libuv, yet every store torchrun's agent makes asks TCPStore for
its libuv server, which that build refuses ("use_libuv was requested but PyTorch was build without
libuv support"): torchrun cannot start anyone there. Here those stores ask for the socket server
instead, as USE_LIBUV=0 makes the workers' env:// rendezvous do. Builds with libuv, and torch 1.x,
which has the socket server alone, run torchrun unchanged."""
import sys

import torch.distributed as dist


class SocketServerStore(dist.TCPStore):
    def __init__(self, *args, **kwargs):
        kwargs.setdefault("use_libuv", False)
        super().__init__(*args, **kwargs)


def lacks_libuv():
    try:
        dist.TCPStore("127.0.0.1", 0, is_master=True, use_libuv=True)
    except TypeError:
        return False  # torch 1.x: no such option
    except RuntimeError as e:
        return "without libuv" in str(e)
    return False


if lacks_libuv():
    dist.TCPStore = SocketServerStore  # before torchrun's modules take the name

from torch.distributed.run import main  # noqa: E402

sys.exit(main())
