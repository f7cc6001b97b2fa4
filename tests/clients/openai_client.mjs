// The official `openai` npm package against a running `tritium serve`.
//
// Usage: node openai_client.mjs BASE_URL MODEL EXPECTED_JSON
//   EXPECTED_JSON: {"prompt": ..., "max_tokens": N, "text": <`tritium run --chat --temperature 0` text>}
//
// Checks chat and completions, whole and streamed, usage (also as the stream's usage chunk),
// stop sequences, seed reproducibility, logprobs, greedy text equal to the CLI's, and the
// client's error classes for an unknown model and a wrong key. Exits non-zero on the first
// failure.

import OpenAI from 'openai';

function check(cond, what) {
  if (!cond) throw new Error(typeof what === 'string' ? what : JSON.stringify(what));
}

const [base, model, expectedJson] = process.argv.slice(2);
const { prompt, max_tokens: maxTokens, text: greedy } = JSON.parse(expectedJson);
const messages = [{ role: 'user', content: prompt }];
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 's3cret', maxRetries: 0 });

const models = await client.models.list();
check(models.data.some((m) => m.id === model), `models: ${JSON.stringify(models.data)}`);

// Chat, whole.
const whole = await client.chat.completions.create({
  model, messages, temperature: 0, max_tokens: maxTokens,
});
check(whole.choices[0].message.content === greedy,
  `chat: ${JSON.stringify(whole.choices[0].message.content)} != ${JSON.stringify(greedy)}`);
const finish = whole.choices[0].finish_reason;
check(['stop', 'length'].includes(finish), `finish_reason ${finish}`);
const u = whole.usage;
check(u.completion_tokens > 0 && u.total_tokens === u.prompt_tokens + u.completion_tokens, u);
check(finish === (u.completion_tokens === maxTokens ? 'length' : 'stop'), { finish, u });

// Chat, streamed, with the usage chunk.
let pieces = '';
let streamedFinish = null;
let usage = null;
const stream = await client.chat.completions.create({
  model, messages, temperature: 0, max_tokens: maxTokens, stream: true,
  stream_options: { include_usage: true },
});
for await (const chunk of stream) {
  if (chunk.usage) usage = chunk.usage;
  for (const c of chunk.choices) {
    if (c.delta.content) pieces += c.delta.content;
    if (c.finish_reason) streamedFinish = c.finish_reason;
  }
}
check(pieces === greedy, `streamed chat: ${JSON.stringify(pieces)}`);
check(streamedFinish === finish, `streamed finish_reason ${streamedFinish}`);
check(usage && usage.completion_tokens === u.completion_tokens, `stream usage ${JSON.stringify(usage)}`);

// A stop sequence from the greedy text: cut there, not part of the text.
const word = greedy.split(/\s+/).filter(Boolean)[2];
const cut = await client.chat.completions.create({
  model, messages, temperature: 0, max_tokens: maxTokens, stop: [word],
});
check(cut.choices[0].message.content === greedy.slice(0, greedy.indexOf(word)),
  `stop: ${JSON.stringify(cut.choices[0].message.content)}`);
check(cut.choices[0].finish_reason === 'stop', cut.choices[0].finish_reason);

// Completions: seeded sampling reproducible; streamed text equal to whole; logprobs.
const sampled = async (seed) => (await client.completions.create({
  model, prompt: 'Once upon a time', max_tokens: 6, temperature: 1.0, seed,
})).choices[0].text;
check(await sampled(5) === await sampled(5), 'the same seed gave different text');
const plain = await client.completions.create({
  model, prompt: 'Once upon a time', max_tokens: 4, temperature: 0, logprobs: 2,
});
check(plain.object === 'text_completion' && plain.choices[0].finish_reason === 'length', plain);
check(plain.usage.completion_tokens === 4, plain.usage);
const lp = plain.choices[0].logprobs;
check(lp.tokens.join('') === plain.choices[0].text && lp.token_logprobs.length === 4, lp);
check(lp.top_logprobs.every((t) => Object.keys(t).length === 2), lp);
let streamedText = '';
let completionFinish = null;
for await (const chunk of await client.completions.create({
  model, prompt: 'Once upon a time', max_tokens: 4, temperature: 0, stream: true,
})) {
  for (const c of chunk.choices) {
    streamedText += c.text;
    if (c.finish_reason) completionFinish = c.finish_reason;
  }
}
check(streamedText === plain.choices[0].text, `streamed completion ${JSON.stringify(streamedText)}`);
check(completionFinish === 'length', completionFinish);

// Chat logprobs: the tokens' bytes make up the text; greedy picks the most likely.
const withLp = await client.chat.completions.create({
  model, messages, temperature: 0, max_tokens: maxTokens, logprobs: true, top_logprobs: 2,
});
const content = withLp.choices[0].logprobs.content;
check(Buffer.from(content.flatMap((t) => t.bytes)).toString('utf8') === greedy, content);
check(content.every((t) => t.logprob <= 0 && t.top_logprobs.length === 2
  && t.top_logprobs[0].token === t.token), content);

// Errors as the client's classes.
try {
  await client.chat.completions.create({ model: 'no-such-model', messages });
  check(false, 'an unknown model was accepted');
} catch (e) {
  check(e instanceof OpenAI.NotFoundError, `unknown model: ${e}`);
}
try {
  await new OpenAI({ baseURL: `${base}/v1`, apiKey: 'wrong', maxRetries: 0 }).models.list();
  check(false, 'a wrong key was accepted');
} catch (e) {
  check(e instanceof OpenAI.AuthenticationError, `wrong key: ${e}`);
}
console.log('npm openai client: all checks passed');
