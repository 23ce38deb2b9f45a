#!/usr/bin/env python3
"""Strangers on a job's TCP store (RELIABILITY E2): garbage, wrong tokens, a 4 GiB length, another
wire version and a flood of connections, each checked to be refused with a reason; then a friend
holding the job token is admitted and served. The handshake is written from the protocol's
description (include/strata/runtime/store_protocol.hpp) with Python's own hmac, so the friend
also checks the C++ HMAC-SHA256 against an independent one.

usage: hostile_store_client.py PORT [--token TOKEN] [--rounds N] [--flood N] [--ports-out FILE]
Exit status 0 when every stranger was refused as expected (and the friend admitted)."""
import argparse
import hashlib
import hmac
import os
import socket
import struct
import sys
import time

MAGIC = b"STRATAST"


def dial(port, timeout=10.0):
    deadline = time.time() + timeout
    while True:
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return s
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.02)


def read_exact(s, n):
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise EOFError("closed after %d of %d bytes" % (len(out), n))
        out += chunk
    return out


def greeting(s):
    head = read_exact(s, 16)
    assert head[:8] == MAGIC, head
    version, n = struct.unpack("<II", head[8:16])
    fingerprint = read_exact(s, n)
    nonce = read_exact(s, 32)
    return version, fingerprint, nonce


def answer(version, fingerprint, nonce_s, token):
    nonce_c = os.urandom(32)
    mac = hmac.new(token, b"strata store client" + nonce_s + nonce_c, hashlib.sha256).digest()
    return nonce_c, MAGIC + struct.pack("<II", version, len(fingerprint)) + fingerprint + nonce_c + mac


def refusal(s):
    """The reason of the store's refusal, read until it closes the connection."""
    data = b""
    try:
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    except OSError:
        pass
    if data[:1] != b"R" or len(data) < 5:
        return "(no refusal: %r)" % data[:40]
    (n,) = struct.unpack("<I", data[1:5])
    return data[5:5 + n].decode(errors="replace")


def attack(port, name, send, expect, log):
    s = dial(port)
    local = s.getsockname()[1]
    version, fingerprint, nonce = greeting(s)
    s.sendall(send(version, fingerprint, nonce))
    reason = refusal(s)
    s.close()
    if callable(expect):
        expect = expect(version)
    ok = expect in reason
    log.append((name, local, reason, ok))
    print("%-12s from port %5d: %s -> %s" % (name, local, "refused" if ok else "NOT AS EXPECTED", reason))
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("port", type=int)
    ap.add_argument("--token", help="the job token: a friend is admitted with it at the end")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--flood", type=int, default=10000)
    ap.add_argument("--ports-out", help="writes 'port reason' of each named stranger here")
    a = ap.parse_args()
    log = []
    ok = True
    for _ in range(a.rounds):  # garbage, then a valid-looking answer under a wrong token
        ok &= attack(a.port, "garbage", lambda v, f, n: b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "not the strata store protocol", log)
        ok &= attack(a.port, "wrong-token", lambda v, f, n: answer(v, f, n, b"not-the-token")[1], "wrong job token", log)
    ok &= attack(a.port, "4GiB-length", lambda v, f, n: MAGIC + struct.pack("<II", v, 0xFFFFFFFF),
                 "a build fingerprint of 4294967295 bytes", log)
    ok &= attack(a.port, "version", lambda v, f, n: answer(v + 1, f, n, b"x")[1], lambda v: "wire protocol v%d vs v%d" % (v + 1, v), log)
    ok &= attack(a.port, "build", lambda v, f, n: answer(v, b"strata 9.9.9", n, b"x")[1], "build 'strata 9.9.9'", log)

    # A flood: connections opened 200 at a time, each left idle, then closed. 200 stay within
    # any listen backlog (the store asks for the system's largest): more at once could have
    # their SYNs dropped while the store accepts, each retried a second later, and the flood
    # could outlast the job.
    start = time.time()
    opened = 0
    while opened < a.flood:
        batch = []
        for _ in range(min(200, a.flood - opened)):
            batch.append(dial(a.port))
            opened += 1
        for s in batch:
            s.close()
    print("flood: %d connections in %.2f s" % (opened, time.time() - start))

    if a.token:
        s = dial(a.port)
        version, fingerprint, nonce_s = greeting(s)
        nonce_c, msg = answer(version, fingerprint, nonce_s, a.token.encode())
        s.sendall(msg)
        verdict = read_exact(s, 1)
        if verdict != b"A":
            print("friend: refused: %s" % refusal(s))
            return 1
        want = hmac.new(a.token.encode(), b"strata store server" + nonce_c + nonce_s, hashlib.sha256).digest()
        if read_exact(s, 32) != want:
            print("friend: the store's proof does not match the token")
            return 1
        key, value = b"hostile_store_client/friend", b"admitted"
        s.sendall(b"S" + struct.pack("<I", len(key)) + key + struct.pack("<I", len(value)) + value)
        assert read_exact(s, 1) == b"\x01"
        s.sendall(b"G" + struct.pack("<I", len(key)) + key + struct.pack("<I", 0))
        (n,) = struct.unpack("<I", read_exact(s, 4))
        got = read_exact(s, n)
        s.close()
        print("friend: admitted, the store's proof checked, set and got back %r" % got)
        ok &= got == value

    named = sum(1 for name, _, _, good in log if good and name in ("garbage", "wrong-token"))
    print("refused with a reason: %d/%d garbage and wrong-token connections" % (named, 2 * a.rounds))
    if a.ports_out:
        with open(a.ports_out, "w") as f:
            for name, port, reason, _ in log:
                f.write("%d %s\n" % (port, name))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
