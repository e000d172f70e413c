#!/usr/bin/python3
"""A wire with a delay: two TUN devices whose packets this process carries across after a fixed
time each way, for a kernel without sch_netem (bench/netns_link.py puts the two devices into its
namespaces and shapes them with tc tbf as it does a veth pair).

The devices take TCP's segmentation offload (virtio-net headers, as a VM's NIC does), so the
stacks on either side keep a 1500-byte MTU while this process moves 64 KB super-packets: a few
thousand a second at 1 Gbit/s, not the 83,000 frames a Python loop could not carry. Packets keep
their order; each is held until `delay_ms` after it was read, then written to the other device.

Usage: delay_line.py DEVICE_A DEVICE_B DELAY_MS. Prints "ready" once both devices exist; runs
until it is terminated or its standard input closes (its parent went away)."""
import collections
import fcntl
import os
import select
import signal
import struct
import sys
import time

TUNSETIFF, TUNSETOFFLOAD = 0x400454CA, 0x400454D0
IFF_TUN, IFF_NO_PI, IFF_VNET_HDR = 0x0001, 0x1000, 0x4000
TUN_F_CSUM, TUN_F_TSO4, TUN_F_TSO6 = 0x01, 0x02, 0x04
LARGEST_PACKET = 65536 + 64  # a TSO super-packet and its virtio-net header


def open_tun(name):
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI | IFF_VNET_HDR))
    fcntl.ioctl(fd, TUNSETOFFLOAD, TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6)
    return fd


def carry(fds, delay_s, stdin):
    """Moves each packet read from one device to the other `delay_s` later, until stdin closes."""
    held = {fd: collections.deque() for fd in fds}  # per source: (due, packet), in arrival order
    other = {fds[0]: fds[1], fds[1]: fds[0]}
    while True:
        now = time.monotonic()
        for source, queue in held.items():
            while queue and queue[0][0] <= now:
                try:
                    os.write(other[source], queue.popleft()[1])
                except OSError:
                    pass  # a full backlog or a device not up yet: the packet is lost, as on a wire
        due = [queue[0][0] for queue in held.values() if queue]
        timeout = max(0.0, min(due) - now) if due else None
        readable, _, _ = select.select([*fds, stdin], [], [], timeout)
        if stdin in readable and not os.read(stdin, 4096):
            return
        arrived = time.monotonic() + delay_s
        for fd in fds:
            if fd in readable:
                while True:
                    try:
                        held[fd].append((arrived, os.read(fd, LARGEST_PACKET)))
                    except BlockingIOError:
                        break


def main():
    name_a, name_b, delay_ms = sys.argv[1], sys.argv[2], float(sys.argv[3])
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    fds = [open_tun(name_a), open_tun(name_b)]
    print("ready", flush=True)
    carry(fds, delay_ms / 1000, sys.stdin.fileno())


if __name__ == "__main__":
    main()
