#!/usr/bin/env python3
"""How long a journal append waits while a large file is removed (decision 203).

An append-and-fdatasync loop (4,000 bytes a time, as the owner task's group commits)
runs beside the removal of a 1.1 GB file (a snapshot at 1 M eSIMs), removed either at
once (`unlink`) or as `esim` removes it: the name first, then cut from the end in steps
of N MiB, each cut synced. Prints the longest append before and during the removal.

    python3 benches/remove_stall.py            # unlink, 16 MiB and 64 MiB steps, twice
    python3 benches/remove_stall.py unlink 16  # the named ways only

    python3 benches/remove_stall.py touch      # no file removed: 3 GiB of fresh memory
                                               # touched instead (what a snapshot's rebuild
                                               # does), to see whether the machine stalls
                                               # syncs for that (a VM backing its memory late)

Writes about 1.1 GB under $TMPDIR (default /tmp) and removes it; not part of CI.
"""
import mmap
import os
import sys
import tempfile
import threading
import time

FILE_MIB = 1100


def measure(way, directory):
    big = os.path.join(directory, "big")
    chunk = os.urandom(1 << 20)
    with open(big, "wb") as out:
        for _ in range(FILE_MIB):
            out.write(chunk)
        out.flush()
        os.fsync(out.fileno())
    time.sleep(1)
    journal = os.open(os.path.join(directory, "journal"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    latencies_ms, stop = [], threading.Event()

    def appender():
        while not stop.is_set():
            began = time.perf_counter()
            os.write(journal, b"x" * 4000)
            os.fdatasync(journal)
            latencies_ms.append((time.perf_counter() - began) * 1e3)

    thread = threading.Thread(target=appender)
    thread.start()
    time.sleep(0.5)
    before = max(latencies_ms)
    first_during = len(latencies_ms)
    began = time.perf_counter()
    if way == "touch":
        fresh = mmap.mmap(-1, 3 << 30)
        for offset in range(0, len(fresh), 4096):
            fresh[offset] = 1
        fresh.close()
        os.remove(big)
    elif way == "unlink":
        os.remove(big)
    else:
        fd = os.open(big, os.O_WRONLY)
        os.remove(big)
        size, step = os.fstat(fd).st_size, int(way) << 20
        while size > 0:
            size = max(0, size - step)
            os.ftruncate(fd, size)
            os.fdatasync(fd)
        os.close(fd)
    dir_fd = os.open(directory, os.O_RDONLY)
    os.fsync(dir_fd)
    os.close(dir_fd)
    removal_ms = (time.perf_counter() - began) * 1e3
    time.sleep(0.5)
    stop.set()
    thread.join()
    os.close(journal)
    os.remove(os.path.join(directory, "journal"))
    label = {"unlink": "unlink at once", "touch": "3 GiB of memory touched"}.get(way, f"cut in {way} MiB steps")
    print(f"{label:>23}: {removal_ms:6.1f} ms; longest append before {before:5.2f} ms, "
          f"during and after {max(latencies_ms[first_during:]):6.2f} ms")


def main():
    ways = sys.argv[1:] or ["unlink", "16", "64"] * 2
    with tempfile.TemporaryDirectory(prefix="esim-remove-stall-") as directory:
        for way in ways:
            measure(way, directory)


if __name__ == "__main__":
    main()
