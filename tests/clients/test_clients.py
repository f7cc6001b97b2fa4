"""The official `openai` and `ollama` Python clients against a running `tritium serve`.

Usage: test_clients.py BASE_URL MODEL EXPECTED_JSON
  EXPECTED_JSON: {"prompt": ..., "max_tokens": N, "text": <`tritium run --chat --temperature 0` text>}

Checks chat and completions, whole and streamed, usage, stop sequences, seed reproducibility,
logprobs and greedy text equal to the CLI's. Exits non-zero on the first failure.
"""

import json
import sys

import ollama
import openai


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def main():
    base, model, expected = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    prompt, max_tokens, greedy = expected["prompt"], expected["max_tokens"], expected["text"]
    messages = [{"role": "user", "content": prompt}]

    client = openai.OpenAI(base_url=base + "/v1", api_key="s3cret", max_retries=0)
    names = [m.id for m in client.models.list().data]
    check(model in names, f"models: {names}")

    r = client.chat.completions.create(
        model=model, messages=messages, temperature=0, max_tokens=max_tokens
    )
    check(r.choices[0].message.content == greedy, f"chat: {r.choices[0].message.content!r} != {greedy!r}")
    check(r.choices[0].finish_reason in ("stop", "length"), r.choices[0].finish_reason)
    u = r.usage
    check(u.total_tokens == u.prompt_tokens + u.completion_tokens and u.completion_tokens > 0, u)

    pieces, finish, usage = [], None, None
    stream = client.chat.completions.create(
        model=model, messages=messages, temperature=0, max_tokens=max_tokens,
        stream=True, stream_options={"include_usage": True},
    )
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            if c.delta.content:
                pieces.append(c.delta.content)
            if c.finish_reason:
                finish = c.finish_reason
    check("".join(pieces) == greedy, f"streamed chat: {''.join(pieces)!r}")
    check(finish == r.choices[0].finish_reason, finish)
    check(usage is not None and usage.completion_tokens == u.completion_tokens, usage)

    # Log-probabilities: the chosen tokens' bytes make up the text, each with 3 alternatives,
    # the greedy choice the most likely.
    r = client.chat.completions.create(
        model=model, messages=messages, temperature=0, max_tokens=max_tokens,
        logprobs=True, top_logprobs=3,
    )
    content = r.choices[0].logprobs.content
    check(bytes(b for t in content for b in t.bytes).decode() == greedy, f"logprobs bytes: {content}")
    for t in content:
        check(t.logprob <= 0 and len(t.top_logprobs) == 3, t)
        check(t.top_logprobs[0].token == t.token and t.top_logprobs[0].logprob == t.logprob, t)
    c = client.completions.create(
        model=model, prompt="Once upon a time", max_tokens=4, temperature=0, logprobs=2
    )
    lp = c.choices[0].logprobs
    check("".join(lp.tokens) == c.choices[0].text, lp)
    check(len(lp.token_logprobs) == 4 and all(len(t) == 2 for t in lp.top_logprobs), lp)

    word = greedy.split()[2]
    r = client.chat.completions.create(
        model=model, messages=messages, temperature=0, max_tokens=max_tokens, stop=[word]
    )
    check(r.choices[0].message.content == greedy[: greedy.index(word)], r.choices[0].message.content)
    check(r.choices[0].finish_reason == "stop", r.choices[0].finish_reason)

    def sampled(seed):
        return client.completions.create(
            model=model, prompt="Once upon a time", max_tokens=6, temperature=1.0, seed=seed
        ).choices[0].text

    check(sampled(11) == sampled(11), "the same seed gave different text")

    text = "".join(
        c.choices[0].text
        for c in client.completions.create(
            model=model, prompt="Once upon a time", max_tokens=4, temperature=0, stream=True
        )
        if c.choices
    )
    whole = client.completions.create(
        model=model, prompt="Once upon a time", max_tokens=4, temperature=0
    )
    check(text == whole.choices[0].text, f"streamed completion {text!r} != {whole.choices[0].text!r}")
    check(whole.choices[0].finish_reason == "length", whole.choices[0].finish_reason)

    try:
        client.chat.completions.create(model="no-such-model", messages=messages)
        check(False, "an unknown model was accepted")
    except openai.NotFoundError:
        pass
    try:
        openai.OpenAI(base_url=base + "/v1", api_key="wrong", max_retries=0).models.list()
        check(False, "a wrong key was accepted")
    except openai.AuthenticationError:
        pass

    o = ollama.Client(host=base, headers={"Authorization": "Bearer s3cret"})
    # No repetition penalty, as `tritium run`'s greedy text (Ollama's default is 1.1).
    greedy_options = {"temperature": 0, "num_predict": max_tokens, "repeat_penalty": 1}
    r = o.chat(model=model, messages=messages, options=greedy_options)
    check(r.message.content == greedy, f"ollama chat: {r.message.content!r}")
    check(r.done and r.done_reason in ("stop", "length") and r.eval_count > 0, r)
    pieces = [
        part.message.content
        for part in o.chat(
            model=model, messages=messages, stream=True, options=greedy_options,
        )
    ]
    check("".join(pieces) == greedy, f"ollama streamed chat: {''.join(pieces)!r}")
    g = o.generate(model=model, prompt="The sky is", raw=True,
                   options={"temperature": 0.7, "num_predict": 5, "seed": 3})
    g2 = o.generate(model=model, prompt="The sky is", raw=True,
                    options={"temperature": 0.7, "num_predict": 5, "seed": 3})
    check(g.response == g2.response and g.eval_count == 5, (g.response, g2.response))
    check(any(m.model == model for m in o.list().models), "ollama list")
    check(any(m.model == model for m in o.ps().models), "ollama ps")
    check(o.show(model).details.family == "llama", "ollama show")
    try:
        o.chat(model="no-such-model", messages=messages)
        check(False, "ollama: an unknown model was accepted")
    except ollama.ResponseError as e:
        check(e.status_code == 404, e)
    print("python clients: all checks passed")


if __name__ == "__main__":
    main()
