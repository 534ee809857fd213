#!/usr/bin/env python3
"""Writes one TFRecord file of tf.train.Example {image: the bytes of IMAGE, label: int64}, one
record per LABEL, framed and encoded by this transcription of the formats (TFRecord framing with
masked CRC-32C; the Example, Features, Feature, BytesList and Int64List protobuf messages), not by
Lockstep.
    write_example_tfrecord.py OUT IMAGE LABEL...
"""
import struct
import sys


def crc32c(data):
    c = 0xFFFFFFFF
    for x in data:
        c ^= x
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    return c ^ 0xFFFFFFFF


def mask(c):
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def varint(v):
    out = b""
    while v >= 0x80:
        out += bytes([(v & 0x7F) | 0x80])
        v >>= 7
    return out + bytes([v])


def field(n, payload):
    return varint(n << 3 | 2) + varint(len(payload)) + payload


def example(image, label):
    feats = {b"image": field(1, field(1, image)), b"label": field(3, field(1, varint(label)))}
    return field(1, b"".join(field(1, field(1, k) + field(2, v)) for k, v in feats.items()))


def frame(record):
    n = struct.pack("<Q", len(record))
    return n + struct.pack("<I", mask(crc32c(n))) + record + struct.pack("<I", mask(crc32c(record)))


def main():
    out, image = sys.argv[1], open(sys.argv[2], "rb").read()
    with open(out, "wb") as f:
        for label in sys.argv[3:]:
            f.write(frame(example(image, int(label))))


if __name__ == "__main__":
    main()
