#!/usr/bin/env python3
"""llama.cpp's tokenizer on our test vocabularies (tests/tokenizer_llama_cpp.rs).

Pinned: llama-cpp-python==0.3.36 (vendors llama.cpp; the same venv as gen_llama_goldens.py:
    python3 -m venv target/llama-venv
    CMAKE_BUILD_PARALLEL_LEVEL=2 target/llama-venv/bin/pip install llama-cpp-python==0.3.36 gguf==0.19.0 numpy
). Run from the repository root after scripts/fetch-models.sh (which also runs
scripts/fetch-test-data.sh):
    target/llama-venv/bin/python tests/goldens/gen_tokenizer_goldens.py

Each GGUF is loaded with vocab_only=True (no weights). For each it records, from llama.cpp's C API:
  - n_vocab, BOS, EOS, EOT, add_bos, add_eos and every id for which llama_vocab_is_eog is true;
  - for every id, the bytes llama_token_to_piece gives (lstrip=0, special=True): a SHA-256 over
    all of them (each piece prefixed with its length as u32 little-endian), and the pieces of
    a few hundred sample ids, hex;
  - for each text in TEXTS: llama_tokenize with add_special True and False, parse_special True
    (special-token text such as <|im_start|> becomes one id), i.e. what llama-cli does with a
    prompt.
Output: tests/goldens/text/llama_cpp_tokenizer.json (small, committed).
"""
import ctypes
import hashlib
import json
import struct
import sys
from pathlib import Path

import llama_cpp

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "goldens" / "text" / "llama_cpp_tokenizer.json"

VOCABS = {
    "smollm2": "models/SmolLM2-135M-Instruct.Q4_1.gguf",
    "llama-bpe": "models/testdata/ggml-vocab-llama-bpe.gguf",
    "gpt-2": "models/testdata/ggml-vocab-gpt-2.gguf",
    "llama-spm": "models/testdata/ggml-vocab-llama-spm.gguf",
    "qwen2": "models/testdata/ggml-vocab-qwen2.gguf",
}

TEXTS = [
    "The capital of France is",
    "Once upon a time, there was a little",
    "def fibonacci(n):\n    ",
    "Hello world! 👋🏽 How's it going?",
    "👩‍👩‍👧‍👦 🏳️‍🌈 🦙🦙 😶‍🌫️",
    "東京は日本の首都です。中文测试，한국어 텍스트",
    "مرحبا بالعالم नमस्ते दुनिया Привет, мир",
    "a  b   c    d\n\n\n  \t\t end   ",
    "   leading and trailing   ",
    "3.14159 1234567 0x1F 1,000,000",
    "Café au lait, naïve résumé; ÀÉÎÕÜ ß ﬁ",
    "fn main() {\n\tprintln!(\"{}\", x?);\n}\n",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
    "<s>[INST] hi [/INST]</s>",
    "<|endoftext|>text after<|endoftext|>",
    "Human: Hi\n\nBITNETAssistant: ",
    "",
    " ",
    "\n",
]


def token_piece(vocab, tid):
    buf = ctypes.create_string_buffer(256)
    n = llama_cpp.llama_token_to_piece(vocab, tid, buf, len(buf), 0, True)
    if n < 0:
        buf = ctypes.create_string_buffer(-n)
        n = llama_cpp.llama_token_to_piece(vocab, tid, buf, len(buf), 0, True)
    return buf.raw[:n]


def tokenize(vocab, text, add_special):
    data = text.encode("utf-8")
    n_max = len(data) + 8
    arr = (llama_cpp.llama_token * n_max)()
    n = llama_cpp.llama_tokenize(vocab, data, len(data), arr, n_max, add_special, True)
    if n < 0:
        raise RuntimeError(f"tokenize {text!r}: {n}")
    return list(arr[:n])


def main():
    llama_cpp.llama_backend_init()
    out = {
        "generator": "tests/goldens/gen_tokenizer_goldens.py",
        "llama_cpp_python": llama_cpp.__version__,
        "texts": TEXTS,
        "vocabs": {},
    }
    for name, rel in VOCABS.items():
        path = ROOT / rel
        if not path.exists():
            sys.exit(f"{path} is missing: run scripts/fetch-models.sh")
        params = llama_cpp.llama_model_default_params()
        params.vocab_only = True
        model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
        if not model:
            sys.exit(f"{path}: llama.cpp could not load it")
        vocab = llama_cpp.llama_model_get_vocab(model)
        n = llama_cpp.llama_vocab_n_tokens(vocab)
        h = hashlib.sha256()
        samples = {}
        step = max(1, n // 300)
        for tid in range(n):
            p = token_piece(vocab, tid)
            h.update(struct.pack("<I", len(p)))
            h.update(p)
            if tid % step == 0 or tid >= n - 20:
                samples[str(tid)] = p.hex()
        opt = lambda t: None if t < 0 else t  # noqa: E731
        out["vocabs"][name] = {
            "file": rel,
            "n_vocab": n,
            "bos": opt(llama_cpp.llama_vocab_bos(vocab)),
            "eos": opt(llama_cpp.llama_vocab_eos(vocab)),
            "eot": opt(llama_cpp.llama_vocab_eot(vocab)),
            "add_bos": bool(llama_cpp.llama_vocab_get_add_bos(vocab)),
            "add_eos": bool(llama_cpp.llama_vocab_get_add_eos(vocab)),
            "eog": [t for t in range(n) if llama_cpp.llama_vocab_is_eog(vocab, t)],
            "pieces_sha256": h.hexdigest(),
            "piece_samples": samples,
            "add_special": [tokenize(vocab, t, True) for t in TEXTS],
            "no_add_special": [tokenize(vocab, t, False) for t in TEXTS],
        }
        llama_cpp.llama_model_free(model)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
