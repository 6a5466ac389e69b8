# Waiting for libnbd requests in flight to end, each with success or an
# error, for the RDMA scenarios that send into a failing network or
# server (import it with LAB_REPO's tests/vm/guest on sys.path).
import select
import time

import nbd


def settle(h, cookies, secs):
    """Drive h until every command in cookies has ended or secs have
    passed.  Returns (succeeded, failed, still_in_flight)."""
    cookies = list(cookies)
    ok = failed = 0
    t0 = time.monotonic()
    while cookies and time.monotonic() - t0 < secs:
        d = h.aio_get_direction()
        fd = h.aio_get_fd()
        r, w, _ = select.select([fd] if d & nbd.AIO_DIRECTION_READ else [],
                                [fd] if d & nbd.AIO_DIRECTION_WRITE else [],
                                [], 1.0)
        if r:
            h.aio_notify_read()
        if w:
            h.aio_notify_write()
        for c in list(cookies):
            try:
                if h.aio_command_completed(c):
                    cookies.remove(c)
                    ok += 1
            except nbd.Error:
                cookies.remove(c)
                failed += 1
    return ok, failed, len(cookies)
