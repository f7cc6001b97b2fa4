#!/usr/bin/env python3
"""Check an RDRR folder written by `tritium convert model.gguf DIR` against the GGUF, with
independent readers: gguf-py (0.19.0) reads the GGUF; this script reads the RDRR folder itself
(manifest.json, tensors.json, the shards with their spans, gguf_metadata.json) from the spec.

It checks, for every tensor: the bytes (joined across shards), the GGML type name, the shape
(outermost first); for every metadata key: its order, GGUF type, element type and value
(floats bit for bit); that every shard's SHA-256 matches the manifest; that every group hash is
the SHA-256 of its tensors' bytes in list order; that tensors start at 4 KiB-aligned offsets.
Optionally (--back OUT.gguf) it also compares a GGUF written back by `tritium convert DIR OUT.gguf`
with the original, through gguf-py.

    target/py-venv/bin/python tests/goldens/check_rdrr_vs_gguf.py models/X.gguf DIR [--back X2.gguf]

gguf-py 0.19.0 does not know I2_S (type 36); such files are refused by its reader, so check them
with --back only (the Rust test compares those files byte for byte).
"""
import hashlib
import json
import os
import struct
import sys

import numpy as np
import gguf

ELEM = {  # GGUFValueType -> name in gguf_metadata.json
    gguf.GGUFValueType.UINT8: "u8", gguf.GGUFValueType.INT8: "i8",
    gguf.GGUFValueType.UINT16: "u16", gguf.GGUFValueType.INT16: "i16",
    gguf.GGUFValueType.UINT32: "u32", gguf.GGUFValueType.INT32: "i32",
    gguf.GGUFValueType.FLOAT32: "f32", gguf.GGUFValueType.BOOL: "bool",
    gguf.GGUFValueType.STRING: "string", gguf.GGUFValueType.ARRAY: "array",
    gguf.GGUFValueType.UINT64: "u64", gguf.GGUFValueType.INT64: "i64",
    gguf.GGUFValueType.FLOAT64: "f64",
}


def norm_float(v, kind):
    """A float as its bits (NaN payloads and -0.0 compared exactly)."""
    if isinstance(v, str):  # non-finite, written as hex bits
        return int(v, 16)
    if kind == "f32":
        return struct.unpack("<I", struct.pack("<f", v))[0]
    return struct.unpack("<Q", struct.pack("<d", v))[0]


def field_values(field):
    """gguf-py field -> (type name, element type name or None, python value)."""
    types = field.types
    kind = ELEM[types[0]]
    if kind != "array":
        part = field.parts[field.data[0]]
        if kind == "string":
            return kind, None, bytes(part).decode("utf-8")
        v = part.tolist()[0]
        if kind in ("f32", "f64"):
            v = norm_float(v, kind)
        if kind == "bool":
            v = bool(v)
        return kind, None, v
    if len(types) > 2 and types[1] == gguf.GGUFValueType.ARRAY:
        raise SystemExit(f"{field.name}: nested arrays are not checked by this script")
    elem = ELEM[types[1]]
    vals = []
    for i in field.data:
        part = field.parts[i]
        if elem == "string":
            vals.append(bytes(part).decode("utf-8"))
        else:
            v = part.tolist()[0]
            vals.append(norm_float(v, elem) if elem in ("f32", "f64") else (bool(v) if elem == "bool" else v))
    return kind, elem, vals


def json_values(entry):
    kind = entry["type"]
    if kind != "array":
        v = entry["value"]
        return kind, None, norm_float(v, kind) if kind in ("f32", "f64") else v
    elem = entry["elementType"]
    vals = entry["value"]
    if elem in ("f32", "f64"):
        vals = [norm_float(v, elem) for v in vals]
    return kind, elem, vals


def read_rdrr_tensor(folder, manifest, t):
    spans = t.get("spans") or [{"shardIndex": t["shard"], "offset": t["offset"], "size": t["size"]}]
    out = bytearray()
    for s in spans:
        name = manifest["shards"][s["shardIndex"]]["fileName"]
        with open(os.path.join(folder, name), "rb") as fh:
            fh.seek(s["offset"])
            out += fh.read(s["size"])
    assert len(out) == t["size"]
    return bytes(out)


def check(gguf_path, folder):
    r = gguf.GGUFReader(gguf_path)
    manifest = json.load(open(os.path.join(folder, "manifest.json")))
    tensors = json.load(open(os.path.join(folder, manifest["tensorsFile"])))
    meta = json.load(open(os.path.join(folder, "gguf_metadata.json")))
    assert manifest["version"] == 1 and manifest["hashAlgorithm"] == "sha256"

    # Metadata: order, types, values. gguf-py lists GGUF.version etc. as pseudo-fields first.
    fields = [f for f in r.fields.values() if not f.name.startswith("GGUF.")]
    assert len(fields) == len(meta["metadata"]), (len(fields), len(meta["metadata"]))
    for f, entry in zip(fields, meta["metadata"]):
        assert f.name == entry["key"], (f.name, entry["key"])
        assert field_values(f) == json_values(entry), f.name
    assert meta["tensors"] == [t.name for t in r.tensors]

    # Tensors: bytes, type, shape.
    for t in r.tensors:
        loc = tensors[t.name]
        assert loc["dtype"] == t.tensor_type.name, (t.name, loc["dtype"], t.tensor_type.name)
        assert loc["shape"] == [int(d) for d in reversed(t.shape.tolist())], t.name
        want = bytes(np.asarray(t.data).reshape(-1).view(np.uint8))
        assert read_rdrr_tensor(folder, manifest, loc) == want, t.name
        # Tensors start 4 KiB-aligned; later spans of a split tensor start at their shard's 0.
        for s in loc.get("spans") or [{"offset": loc["offset"]}]:
            assert s["offset"] % 4096 == 0, t.name
    assert set(tensors) == {t.name for t in r.tensors}

    # Shard and group hashes.
    for s in manifest["shards"]:
        data = open(os.path.join(folder, s["fileName"]), "rb").read()
        assert len(data) == s["size"] and hashlib.sha256(data).hexdigest() == s["hash"], s["fileName"]
    for gid, g in manifest["groups"].items():
        h = hashlib.sha256()
        for name in g["tensors"]:
            h.update(read_rdrr_tensor(folder, manifest, tensors[name]))
            assert tensors[name]["group"] == gid
        assert h.hexdigest() == g["hash"], gid
    spanning = sum(1 for t in tensors.values() if t.get("spans"))
    print(f"{folder}: {len(tensors)} tensors ({spanning} spanning shards), {len(fields)} keys, "
          f"{len(manifest['shards'])} shards, {len(manifest['groups'])} groups: all match {gguf_path}")


def check_back(original, back):
    a, b = gguf.GGUFReader(original), gguf.GGUFReader(back)
    fa = [(f.name, field_values(f)) for f in a.fields.values() if not f.name.startswith("GGUF.")]
    fb = [(f.name, field_values(f)) for f in b.fields.values() if not f.name.startswith("GGUF.")]
    assert fa == fb
    assert [(t.name, t.tensor_type, t.shape.tolist()) for t in a.tensors] == \
        [(t.name, t.tensor_type, t.shape.tolist()) for t in b.tensors]
    for x, y in zip(a.tensors, b.tensors):
        assert np.asarray(x.data).tobytes() == np.asarray(y.data).tobytes(), x.name
    print(f"{back}: metadata and {len(a.tensors)} tensors equal to {original} (gguf-py)")


if __name__ == "__main__":
    args = sys.argv[1:]
    back = None
    if "--back" in args:
        i = args.index("--back")
        back = args[i + 1]
        del args[i:i + 2]
    src, folder = args
    try:
        check(src, folder)
    except ValueError as e:  # gguf-py refuses I2_S (type 36)
        print(f"gguf-py cannot read {src}: {e}")
    if back:
        try:
            check_back(src, back)
        except ValueError as e:
            print(f"gguf-py cannot read {src}: {e} (compare the files byte for byte instead)")
