"""Reads the .safetensors files recap writes, for tests/cli_test.sh: a reader of our own from
the format's definition (an 8-byte little-endian header length, a JSON header, the data), not
recap's, so the CLI's files are checked independently.

    header, tensor = load(path)
    shape, values = tensor("y")     # values: a list of floats (F32) or ints (I32)
"""
import json
import struct

_CODES = {"F32": "f", "I32": "i"}


def load(path):
    blob = open(path, "rb").read()
    n = struct.unpack("<Q", blob[:8])[0]
    header, data = json.loads(blob[8:8 + n]), blob[8 + n:]

    def tensor(name):
        h = header[name]
        begin, end = h["data_offsets"]
        code = _CODES[h["dtype"]]
        return h["shape"], list(struct.unpack(f"<{(end - begin) // 4}{code}", data[begin:end]))

    return header, tensor
