#!/usr/bin/env python3
"""Writes tests/fuzz/corpus/fashion_mnist/: the binary inputs of fuzz_fashion_mnist (images file,
b"--LABELS", labels file). Run again after changing it; the files are committed.
"regression-*" are the inputs of issue 9 that once trained or crashed; "seed-*" start fuzzing."""
import gzip
import os
import random
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "fashion_mnist")
SEP = b"--LABELS"


def images(n, rows=28, cols=28, magic=0x803, pixels=None, rng=None):
    rng = rng or random.Random(n)
    if pixels is None:
        pixels = n * rows * cols
    data = bytes(rng.randrange(0, 256) if i % 7 == 0 else 0 for i in range(pixels))
    return struct.pack(">IIII", magic, n, rows, cols) + data


def labels(n, magic=0x801, bad=None):
    data = bytearray(i % 10 for i in range(n))
    if bad is not None:
        data[-1] = bad
    return struct.pack(">II", magic, n) + bytes(data)


def gz(b):
    return gzip.compress(b, compresslevel=6, mtime=0)


def write(name, img, lab):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(img + SEP + lab)


def main():
    os.makedirs(OUT, exist_ok=True)
    for old in os.listdir(OUT):
        os.remove(os.path.join(OUT, old))
    write("seed-valid-gzip", gz(images(4)), gz(labels(4)))
    write("seed-valid-plain", images(2), labels(2))
    write("seed-label-above-9", gz(images(3)), gz(labels(3, bad=10)))
    write("seed-counts-differ", gz(images(3)), gz(labels(2)))
    write("seed-not-28x28", gz(images(2, 27, 28)), gz(labels(2)))
    # issue 9, finding 5: a 140-byte file declaring 2^32 - 1 images (3.4 TB asked for)
    huge = struct.pack(">IIII", 0x803, 0xFFFFFFFF, 28, 28) + bytes(124)
    write("regression-declares-4294967295-images", huge, gz(labels(3)))
    # a 35-byte gzip file declaring 3 M images (2.3 GB per process asked for)
    small = gz(struct.pack(">IIII", 0x803, 3_000_000, 28, 28))
    write("regression-small-file-declares-3M-images", small, gz(labels(3)))
    # finding 2: flipped bytes in the compressed stream (gzip -t: CRC error) trained
    good = bytearray(gz(images(6)))
    rng = random.Random(64)
    for i in rng.sample(range(40, len(good) - 16), 16):
        good[i] ^= 0xFF
    write("regression-flipped-bytes", bytes(good), gz(labels(6)))
    # the CRC of an intact stream replaced: only the trailer check catches it
    trailer = bytearray(gz(images(3)))
    trailer[-8] ^= 0x01
    write("regression-crc-does-not-match", bytes(trailer), gz(labels(3)))
    write("regression-truncated", gz(images(4))[:-30], gz(labels(4)))
    write("regression-data-beyond-count", gz(images(3) + bytes(784)), gz(labels(3)))


if __name__ == "__main__":
    main()
