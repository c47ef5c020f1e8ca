"""Unmodified Python sockets for bin/sluice/tests/hoststack.rs (run under libsluice_preload.so).

  sockets.py client <ip> <port> <bytes>  stream to a kernel echo server through selectors
                                          (epoll, non-blocking; getsockopt of an
                                          unknown option fails), then 200 request/responses
                                          with blocking calls and a timeout (poll), after a
                                          forked child closed its copy; checks
                                          every byte; prints "ok <bytes> <local addr>"
  sockets.py server <port>               accept one connection, echo until end of stream
                                          (blocking recv/sendall); prints "ready", "echoed <n>"
  sockets.py udp <ip> <port> <count>     datagrams to a kernel UDP echo, each checked
                                          (recv with MSG_PEEK fails with EOPNOTSUPP,
                                          writev sends one datagram);
                                          prints "ok <count>"
  sockets.py halfclose <ip> <port> <bytes>
                                          send <bytes> to a kernel server, shutdown(SHUT_WR)
                                          (a later send fails with EPIPE), then read its
                                          reply until end of stream; prints the reply
  sockets.py halfclose-server <port> [slow]
                                          accept one connection, send "hello",
                                          shutdown(SHUT_WR), then read until end of
                                          stream (slow: 8 KiB every 20 ms, so that the
                                          peer's FIN finds the rx FIFO full); prints
                                          "ready", "got <n> <sum>"
"""
import errno
import os
import selectors
import socket
import sys
import time


def pat(i, n):
    return bytes((k * 131 + (k >> 9)) & 0xFF for k in range(i, i + n))


def client(ip, port, total):
    s = socket.create_connection((ip, port))
    local = s.getsockname()
    assert s.getpeername() == (ip, port), s.getpeername()
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    assert s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
    try:
        s.getsockopt(socket.SOL_SOCKET, socket.SO_LINGER, 8)
        sys.exit("getsockopt(SO_LINGER) made up an answer")
    except OSError as e:
        if e.errno != errno.ENOPROTOOPT:
            raise
    s.setblocking(False)
    sel = selectors.DefaultSelector()
    sel.register(s, selectors.EVENT_READ | selectors.EVENT_WRITE)
    want = pat(0, total)
    sent, got = 0, bytearray()
    while len(got) < total:
        ready = sel.select(timeout=10)
        if not ready:
            sys.exit(f"timeout at {len(got)}/{total}")
        for _, ev in ready:
            if ev & selectors.EVENT_WRITE and sent < total:
                k = 1 + (sent * 7) % 5000
                try:
                    sent += s.send(want[sent:sent + k])
                except BlockingIOError:
                    pass
                if sent == total:
                    sel.modify(s, selectors.EVENT_READ)
            if ev & selectors.EVENT_READ:
                try:
                    b = s.recv(65536)
                except BlockingIOError:
                    continue
                if not b:
                    sys.exit("early end of stream")
                got += b
    if bytes(got) != want:
        sys.exit("echo differs")
    sel.unregister(s)
    # A forked child that closes the inherited socket leaves the parent's connection alone.
    pid = os.fork()
    if pid == 0:
        s.close()
        os._exit(0)
    os.waitpid(pid, 0)
    s.setblocking(True)
    s.settimeout(5)
    for i in range(200):
        req = pat(i, 1 + i * 37 % 3000)
        s.sendall(req)
        back = b""
        while len(back) < len(req):
            b = s.recv(len(req) - len(back))
            if not b:
                sys.exit("early end of stream")
            back += b
        if back != req:
            sys.exit(f"request {i} differs")
    s.close()
    print(f"ok {total} {local[0]}:{local[1]}", flush=True)


def server(port):
    l = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind(("0.0.0.0", port))
    l.listen(8)
    print("ready", flush=True)
    c, peer = l.accept()
    n = 0
    while True:
        b = c.recv(65536)
        if not b:
            break
        c.sendall(b)
        n += len(b)
    c.close()
    l.close()
    print(f"echoed {n} to {peer[0]}", flush=True)


def udp(ip, port, count):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(5)
    s.sendto(b"peek", (ip, port))
    try:
        s.recv(2048, socket.MSG_PEEK)
        sys.exit("MSG_PEEK succeeded (and consumed the datagram)")
    except OSError as e:
        if e.errno != errno.EOPNOTSUPP:
            raise
    if s.recv(2048) != b"peek":
        sys.exit("the datagram after MSG_PEEK differs")
    for i in range(count):
        p = pat(i, 1 + i * 97 % 1400)
        s.sendto(p, (ip, port))
        b, frm = s.recvfrom(2048)
        if b != p or frm != (ip, port):
            sys.exit(f"datagram {i} differs ({len(b)} bytes from {frm})")
    # writev on a connected socket sends one datagram of all its buffers.
    c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    c.settimeout(5)
    c.connect((ip, port))
    os.writev(c.fileno(), [b"one ", b"", b"datagram"])
    if c.recv(2048) != b"one datagram":
        sys.exit("writev did not send one datagram")
    c.close()
    s.close()
    print(f"ok {count}", flush=True)


def read_to_end(s, slow=False):
    out = b""
    while True:
        if slow:
            time.sleep(0.02)
        b = s.recv(8192 if slow else 65536)
        if not b:
            return out
        out += b


def checksum(b):
    return sum(b) & 0xFFFFFFFF


def halfclose(ip, port, total):
    s = socket.create_connection((ip, port))
    data = pat(0, total)
    s.sendall(data)
    s.shutdown(socket.SHUT_WR)
    try:
        s.send(b"x")
        sys.exit("send after shutdown(SHUT_WR) succeeded")
    except BrokenPipeError:
        pass
    reply = read_to_end(s)
    s.close()
    print(reply.decode(), flush=True)


def halfclose_server(port, slow=False):
    l = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind(("0.0.0.0", port))
    l.listen(1)
    print("ready", flush=True)
    c, _ = l.accept()
    c.sendall(b"hello")
    c.shutdown(socket.SHUT_WR)
    got = read_to_end(c, slow)
    c.close()
    l.close()
    print(f"got {len(got)} {checksum(got)}", flush=True)


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "client":
        client(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif mode == "server":
        server(int(sys.argv[2]))
    elif mode == "udp":
        udp(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif mode == "halfclose":
        halfclose(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif mode == "halfclose-server":
        halfclose_server(int(sys.argv[2]), sys.argv[3:] == ["slow"])
    else:
        sys.exit(__doc__)
