# SPDX-License-Identifier: MIT
"""tests/net/wire.py - craft the binary bodies of net/wire.h for the node
tests (hostile and hand-made requests), with python3's standard library.

    wire.py recipe OUT [--mode M] [--mtime S] [--corrupt magic|truncate|checksum]
                       ENTRY...
        ENTRY is HEXID:LEN[:SKIP] (a chunk range) or hole:LEN, either
        followed by *N for N times the same entry.  Writes the
        recipe (header, entries, SHA-256 trailer); --corrupt spoils it one
        way: the magic, the last 10 bytes cut off, one trailer byte flipped.
    wire.py batch OUT REC...
        REC is good:SEED:LEN (LEN pseudo-random bytes from SEED, id their
        SHA-256) or bad:SEED:LEN (the same payload, but the id of SEED+1's
        bytes: a payload that does not match its id).  Raw records.  Prints
        each record's id (hex) on a line.
    wire.py payload SEED LEN [OUT]  the hex SHA-256 of what good:SEED:LEN
                                 sends (and those bytes into OUT)
    wire.py ids OUT HEX...       the 32-byte ids back to back
    wire.py randid N             N random ids, hex, one a line
"""
import hashlib
import os
import struct
import sys


def payload(seed, n):
    out = bytearray()
    ctr = 0
    while len(out) < n:
        out += hashlib.sha256(b"%d:%d" % (seed, ctr)).digest()
        ctr += 1
    return bytes(out[:n])


def recipe(args):
    out, mode, mtime, corrupt = args[0], 0o644, 1700000000, None
    rest = args[1:]
    while rest and rest[0].startswith("--"):
        opt, val = rest[0], rest[1]
        rest = rest[2:]
        if opt == "--mode":
            mode = int(val, 0)
        elif opt == "--mtime":
            mtime = int(val)
        elif opt == "--corrupt":
            corrupt = val
        else:
            sys.exit("wire.py recipe: unknown option " + opt)
    ents = []
    size = 0
    for e in rest:
        e, _, times = e.partition("*")
        times = int(times) if times else 1
        f = e.split(":")
        if f[0] == "hole":
            ent = struct.pack("<32sQII", b"\0" * 32, int(f[1]), 0, 1)
        else:
            skip = int(f[2]) if len(f) > 2 else 0
            ent = struct.pack("<32sQII", bytes.fromhex(f[0]), int(f[1]), skip, 0)
        ents.append(ent * times)
        size += int(f[1]) * times
    n = sum(len(x) for x in ents) // 48
    ents = b"".join(ents)
    hdr = struct.pack("<4sHHQIIqIIQ", b"DMRC", 1, 0, size, mode, 0, mtime, 0, n, 0)
    # recipe id: SHA-256(header || content id), content id: SHA-256(entries)
    body = hdr + ents + hashlib.sha256(hdr + hashlib.sha256(ents).digest()).digest()
    if corrupt == "magic":
        body = b"XMRC" + body[4:]
    elif corrupt == "truncate":
        body = body[:-10]
    elif corrupt == "checksum":
        body = body[:-1] + bytes([body[-1] ^ 1])
    elif corrupt:
        sys.exit("wire.py recipe: unknown corruption " + corrupt)
    with open(out, "wb") as f:
        f.write(body)


def batch(args):
    out, recs = args[0], args[1:]
    with open(out, "wb") as f:
        f.write(struct.pack("<4sHHII", b"DMCB", 1, 0, len(recs), 0))
        for r in recs:
            kind, seed, n = r.split(":")
            seed, n = int(seed), int(n)
            p = payload(seed, n)
            cid = hashlib.sha256(p if kind == "good" else payload(seed + 1, n)).digest()
            f.write(struct.pack("<32sB3xII", cid, 0, n, n))
            f.write(p)
            print(cid.hex())


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "recipe":
        recipe(args)
    elif cmd == "batch":
        batch(args)
    elif cmd == "payload":
        p = payload(int(args[0]), int(args[1]))
        if len(args) > 2:
            with open(args[2], "wb") as f:
                f.write(p)
        print(hashlib.sha256(p).hexdigest())
    elif cmd == "ids":
        with open(args[0], "wb") as f:
            for h in args[1:]:
                f.write(bytes.fromhex(h))
    elif cmd == "randid":
        for _ in range(int(args[0])):
            print(os.urandom(32).hex())
    else:
        sys.exit("wire.py: unknown command " + cmd)


main()
