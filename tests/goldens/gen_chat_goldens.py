#!/usr/bin/env python3
"""Chat templates rendered by Python's Jinja2 the way transformers renders them
(tests/chat_template.rs).

Pinned: jinja2==3.1.6, gguf==0.19.0 (gguf-py, to read the templates from the GGUF files).
    python3 -m venv target/chat-venv && target/chat-venv/bin/pip install jinja2==3.1.6 gguf==0.19.0
Run from the repository root after scripts/fetch-models.sh (which also fetches models/testdata):
    target/chat-venv/bin/python tests/goldens/gen_chat_goldens.py

The environment is transformers' (`_compile_jinja_template` in transformers 4.x/5.x):
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
extensions=[jinja2.ext.loopcontrols]), a `tojson` filter that is json.dumps(ensure_ascii=False),
a `raise_exception` global; rendered with messages, tools=None, documents=None,
add_generation_prompt and the special-token strings (bos_token, eos_token, ...), as
`apply_chat_template` does.

Templates:
  - smollm2: tokenizer.chat_template of models/SmolLM2-135M-Instruct.Q4_1.gguf; BOS/EOS texts are
    its tokens at tokenizer.ggml.bos_token_id / eos_token_id;
  - qwen2: tokenizer.chat_template of models/testdata/ggml-vocab-qwen2.gguf;
  - llama3: chat_template of models/testdata/llama3-tokenizer_config.json, with its bos_token and
    eos_token;
  - bitnet: the template Microsoft's BitNet converter writes (text copied below), with
    <|begin_of_text|> / <|end_of_text|>.
Output: tests/goldens/text/chat_templates.json (small, committed), with each template's SHA-256
so that a test notices when it reads a different template.
"""
import hashlib
import json
import sys
from pathlib import Path

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment
from gguf import GGUFReader

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "goldens" / "text" / "chat_templates.json"

BITNET = (
    "{% for message in messages %}{% if loop.first %}{{ bos_token }}{% endif %}"
    "{% if message['role'] == 'user' %}"
    "{{ 'Human: ' + message['content'] + '\\n\\nBITNETAssistant: ' + eos_token }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token }}{% endif %}"
    "{% endfor %}"
)

CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [
        {"role": "system", "content": "You are a pirate."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Arr, hello!"},
        {"role": "user", "content": "Tell me a joke  "},
    ],
    [{"role": "user", "content": "  spaces around,\nand newlines\n\n  "}],
    [
        {"role": "user", "content": "emoji 🦙 and 東京 <b>html</b> & \"quotes\""},
        {"role": "assistant", "content": "ok"},
    ],
    [],
]


def gguf_template(path):
    r = GGUFReader(path)
    f = r.fields
    template = f["tokenizer.chat_template"].contents()
    tokens = f["tokenizer.ggml.tokens"].contents()
    bos = tokens[f["tokenizer.ggml.bos_token_id"].contents()]
    eos = tokens[f["tokenizer.ggml.eos_token_id"].contents()]
    return template, bos, eos


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def main():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception

    sources = {}
    for name, rel in [("smollm2", "models/SmolLM2-135M-Instruct.Q4_1.gguf"),
                      ("qwen2", "models/testdata/ggml-vocab-qwen2.gguf")]:
        p = ROOT / rel
        if not p.exists():
            sys.exit(f"{p} is missing: run scripts/fetch-models.sh")
        sources[name] = (rel,) + gguf_template(str(p))
    cfg_path = ROOT / "models/testdata/llama3-tokenizer_config.json"
    if not cfg_path.exists():
        sys.exit(f"{cfg_path} is missing: run scripts/fetch-test-data.sh")
    cfg = json.loads(cfg_path.read_text())
    sources["llama3"] = ("models/testdata/llama3-tokenizer_config.json", cfg["chat_template"],
                         cfg["bos_token"], cfg["eos_token"])
    sources["bitnet"] = ("(the BitNet converter's template)", BITNET, "<|begin_of_text|>", "<|end_of_text|>")

    out = {"generator": "tests/goldens/gen_chat_goldens.py", "jinja2": jinja2.__version__,
           "conversations": CONVERSATIONS, "templates": {}}
    for name, (src, template, bos, eos) in sources.items():
        t = env.from_string(template)
        renders = []
        for conv in CONVERSATIONS:
            for gen in (True, False):
                try:
                    text = t.render(messages=conv, tools=None, documents=None, add_generation_prompt=gen,
                                    bos_token=bos, eos_token=eos)
                    renders.append({"add_generation_prompt": gen, "text": text})
                except jinja2.exceptions.TemplateError as e:
                    renders.append({"add_generation_prompt": gen, "error": str(e)})
        out["templates"][name] = {
            "source": src,
            "template_sha256": hashlib.sha256(template.encode()).hexdigest(),
            "bos_token": bos,
            "eos_token": eos,
            "renders": renders,
        }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
