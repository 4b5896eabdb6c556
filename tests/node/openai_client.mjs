// openai_client.mjs — the official `openai` npm client, unmodified, against `phi4mm serve`.
// usage: node openai_client.mjs BASE_URL API_KEY EXPECTED_JSON AUDIO_FILE [TRANSCRIPT_OUT]
// EXPECTED_JSON holds the CLI's greedy outputs written by tests/e2e/server_api.py. Prints
// "PASS name" / "FAIL name (why)" lines; TRANSCRIPT_OUT receives a readable session transcript.
import fs from 'node:fs';
import OpenAI from 'openai';

const [baseURL, apiKey, expectedPath, audioPath, transcriptPath] = process.argv.slice(2);
const expected = JSON.parse(fs.readFileSync(expectedPath, 'utf8'));
const client = new OpenAI({ baseURL: `${baseURL}/v1`, apiKey, maxRetries: 0, timeout: 120_000 });
const log = [];
let failed = 0;

function report(name, ok, why = '') {
  if (!ok) failed++;
  console.log(`${ok ? 'PASS' : 'FAIL'} openai-node ${name}${ok || !why ? '' : ` (${why})`}`);
}

async function check(name, fn) {
  try {
    await fn();
  } catch (e) {
    report(name, false, `${e.constructor.name}: ${e.message}`);
  }
}

await check('models.list', async () => {
  const models = await client.models.list();
  const ids = [];
  for await (const m of models) ids.push(m.id);
  log.push(`> client.models.list()\n< ${JSON.stringify(ids)}`);
  report('models.list', ids.length === 1);
});

await check('streamed chat equals CLI', async () => {
  const req = {
    model: 'phi-4-multimodal-instruct',
    messages: [
      { role: 'system', content: 'You are a helpful assistant.' },
      { role: 'user', content: 'What is the capital of France?' },
    ],
    max_tokens: 12,
    temperature: 0,
    stream: true,
    stream_options: { include_usage: true },
  };
  log.push(`> client.chat.completions.create(${JSON.stringify(req)})`);
  const stream = await client.chat.completions.create(req);
  let text = '';
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    log.push(`< ${JSON.stringify(chunk)}`);
    for (const c of chunk.choices) {
      text += c.delta?.content ?? '';
      finish = c.finish_reason ?? finish;
    }
    if (chunk.usage) usage = chunk.usage;
  }
  log.push(`= content ${JSON.stringify(text)}, finish_reason ${finish}`);
  report('streamed chat equals CLI', text === expected.text && finish === 'length' && usage?.completion_tokens === 12,
    `${JSON.stringify(text)} vs ${JSON.stringify(expected.text)}, finish ${finish}, usage ${JSON.stringify(usage)}`);
});

await check('completions equal chat', async () => {
  const prompt = '<|system|>You are a helpful assistant.<|end|><|user|>What is the capital of France?<|end|><|assistant|>';
  const r = await client.completions.create({ model: 'phi-4-multimodal-instruct', prompt, max_tokens: 12 });
  log.push(`> client.completions.create({prompt: <the chat template's text>, max_tokens: 12})\n< ${JSON.stringify(r)}`);
  const stream = await client.completions.create({ model: 'phi-4-multimodal-instruct', prompt, max_tokens: 12, stream: true });
  let text = '';
  for await (const chunk of stream) for (const c of chunk.choices) text += c.text ?? '';
  log.push(`> client.completions.create({..., stream: true})\n= text ${JSON.stringify(text)}`);
  report('completions equal chat', r.choices[0].text === expected.text && text === expected.text && r.usage?.completion_tokens === 12,
    `${JSON.stringify(r.choices[0].text)} / streamed ${JSON.stringify(text)} vs ${JSON.stringify(expected.text)}`);
});

await check('chat logprobs', async () => {
  const r = await client.chat.completions.create({
    model: 'phi-4-multimodal-instruct',
    messages: [
      { role: 'system', content: 'You are a helpful assistant.' },
      { role: 'user', content: 'What is the capital of France?' },
    ],
    max_tokens: 12,
    logprobs: true,
    top_logprobs: 2,
  });
  const content = r.choices[0].logprobs?.content ?? [];
  log.push(`> client.chat.completions.create({..., logprobs: true, top_logprobs: 2})\n< ${JSON.stringify(r.choices[0].logprobs).slice(0, 400)}...`);
  report('chat logprobs', r.choices[0].message.content === expected.text && content.length === 12 &&
    content.every((e) => e.logprob <= 0 && e.top_logprobs.length === 2 && e.top_logprobs[0].token === e.token),
    `${content.length} entries: ${JSON.stringify(content[0])}`);
});

await check('completions echo scores the prompt', async () => {
  const prompt = '<|system|>You are a helpful assistant.<|end|><|user|>What is the capital of France?<|end|><|assistant|>';
  const r = await client.completions.create({ model: 'phi-4-multimodal-instruct', prompt, max_tokens: 0, echo: true, logprobs: 1 });
  const lp = r.choices[0].logprobs ?? {};
  log.push(`> client.completions.create({prompt, max_tokens: 0, echo: true, logprobs: 1})\n< ${JSON.stringify(r).slice(0, 400)}...`);
  const n = lp.tokens?.length ?? 0;
  report('completions echo scores the prompt', r.choices[0].text === prompt && n === r.usage?.prompt_tokens &&
    lp.tokens.join('') === prompt && lp.token_logprobs[0] === null && lp.token_logprobs.slice(1).every((v) => v <= 0) &&
    r.usage?.completion_tokens === 0, `${n} entries: ${JSON.stringify(lp).slice(0, 300)}`);
});

await check('chat n 2 streamed', async () => {
  const req = { model: 'phi-4-multimodal-instruct', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 5, n: 2, temperature: 1.0, seed: 3 };
  const r = await client.chat.completions.create(req);
  const stream = await client.chat.completions.create({ ...req, stream: true });
  const texts = ['', ''];
  for await (const chunk of stream) for (const c of chunk.choices) texts[c.index] += c.delta?.content ?? '';
  log.push(`> client.chat.completions.create({..., n: 2, stream: true})\n= ${JSON.stringify(texts)}`);
  report('chat n 2 streamed', r.choices.length === 2 && r.choices.every((c, i) => c.index === i && c.message.content === texts[i]),
    `${JSON.stringify(r.choices.map((c) => c.message.content))} vs streamed ${JSON.stringify(texts)}`);
});

await check('image+audio chat equals CLI', async () => {
  const image = fs.readFileSync(audioPath.replace(/clip_a_16k\.wav$/, 'image.png')).toString('base64');
  const audio = fs.readFileSync(audioPath).toString('base64');
  const r = await client.chat.completions.create({
    model: 'phi-4-multimodal-instruct',
    messages: [{
      role: 'user',
      content: [
        { type: 'image_url', image_url: { url: `data:image/png;base64,${image}` } },
        { type: 'input_audio', input_audio: { data: audio, format: 'wav' } },
        { type: 'text', text: 'Answer the spoken question about the image.' },
      ],
    }],
    max_tokens: 12,
  });
  log.push(`> client.chat.completions.create({image_url + input_audio + text, max_tokens: 12})\n< ${JSON.stringify(r)}`);
  report('image+audio chat equals CLI', r.choices[0].message.content === expected['image+audio'],
    `${JSON.stringify(r.choices[0].message.content)} vs ${JSON.stringify(expected['image+audio'])}`);
});

await check('transcription equals CLI', async () => {
  const r = await client.audio.transcriptions.create({
    file: fs.createReadStream(audioPath),
    model: 'phi-4-multimodal-instruct',
    max_tokens: 12,
  });
  log.push(`> client.audio.transcriptions.create({file: clip_a_16k.wav, max_tokens: 12})\n< ${JSON.stringify(r)}`);
  report('transcription equals CLI', r.text === expected.transcribe, `${JSON.stringify(r.text)} vs ${JSON.stringify(expected.transcribe)}`);
});

await check('streamed transcription', async () => {
  const stream = await client.audio.transcriptions.create({
    file: fs.createReadStream(audioPath),
    model: 'phi-4-multimodal-instruct',
    stream: true,
    max_tokens: 12,
  });
  log.push('> client.audio.transcriptions.create({file: clip_a_16k.wav, stream: true, max_tokens: 12})');
  let deltas = '';
  let done = null;
  for await (const ev of stream) {
    log.push(`< ${JSON.stringify(ev)}`);
    if (ev.type === 'transcript.text.delta') deltas += ev.delta;
    if (ev.type === 'transcript.text.done') done = ev.text;
  }
  report('streamed transcription', deltas === expected.transcribe && done === expected.transcribe,
    `${JSON.stringify(deltas)} / ${JSON.stringify(done)} vs ${JSON.stringify(expected.transcribe)}`);
});

await check('wrong key raises AuthenticationError', async () => {
  const bad = new OpenAI({ baseURL: `${baseURL}/v1`, apiKey: 'wrong', maxRetries: 0, timeout: 30_000 });
  try {
    await bad.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: 'hi' }], max_tokens: 1 });
    report('wrong key raises AuthenticationError', false, 'no error');
  } catch (e) {
    log.push(`> (wrong key) client.chat.completions.create(...)\n< ${e.constructor.name} ${e.status}: ${e.message}`);
    report('wrong key raises AuthenticationError', e instanceof OpenAI.AuthenticationError && e.status === 401, `${e.constructor.name} ${e.status}`);
  }
});

await check('bad request raises BadRequestError', async () => {
  try {
    await client.chat.completions.create({
      model: 'x',
      messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'https://example.com/cat.png' } }] }],
    });
    report('bad request raises BadRequestError', false, 'no error');
  } catch (e) {
    log.push(`> client.chat.completions.create({image_url: https://...})\n< ${e.constructor.name} ${e.status}: ${e.message}`);
    // the server fetches image URLs of 127.0.0.1 only (--allow-media-hosts): example.com is refused before any transfer
    report('bad request raises BadRequestError', e instanceof OpenAI.BadRequestError && e.status === 400 && e.code === 'invalid_image_url'
      && /example\.com' is not one this server fetches/.test(e.message),
      `${e.constructor.name} ${e.status} ${e.code}`);
  }
});

await check('tool call, streamed helper equals create', async () => {
  const req = {
    model: 'x',
    messages: [{ role: 'user', content: 'What is the weather in Paris?' }],
    tools: [{
      type: 'function',
      function: {
        name: 'get_weather',
        description: 'Weather of a city',
        parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 12 }, unit: { enum: ['c', 'f'] } }, required: ['city', 'unit'] },
      },
    }],
    tool_choice: 'required',
    parallel_tool_calls: false,
    max_tokens: 300,
  };
  log.push(`> client.chat.completions.create(${JSON.stringify(req)})`);
  const r = await client.chat.completions.create(req);
  log.push(`< ${JSON.stringify(r)}`);
  const stream = client.chat.completions.stream(req); // the SDK's helper assembles delta.tool_calls
  const f = await stream.finalChatCompletion();
  log.push(`< (stream) ${JSON.stringify(f.choices[0].message)}`);
  const a = r.choices[0].message.tool_calls?.[0], b = f.choices[0].message.tool_calls?.[0];
  const args = a ? JSON.parse(a.function.arguments) : null;
  report('tool call, streamed helper equals create', a && b && r.choices[0].finish_reason === 'tool_calls' &&
    f.choices[0].finish_reason === 'tool_calls' && a.function.name === 'get_weather' && b.function.name === a.function.name &&
    b.function.arguments === a.function.arguments && typeof args.city === 'string' && ['c', 'f'].includes(args.unit),
    JSON.stringify([r.choices[0], f.choices[0]]).slice(0, 300));
});

await check('responses: create and the stream helper equal the CLI', async () => {
  const req = {
    model: 'phi-4-multimodal-instruct',
    instructions: 'You are a helpful assistant.',
    input: [{ role: 'user', content: [{ type: 'input_text', text: 'What is the capital of France?' }] }],
    max_output_tokens: 12,
  };
  log.push(`> client.responses.create(${JSON.stringify(req)})`);
  const r = await client.responses.create(req);
  log.push(`< ${JSON.stringify(r)}`);
  const stream = client.responses.stream(req); // the SDK's helper checks the events' order as it assembles them
  let deltas = '';
  stream.on('response.output_text.delta', (e) => { deltas += e.delta; });
  const f = await stream.finalResponse();
  log.push(`< (stream) ${JSON.stringify(f)}`);
  report('responses: create and the stream helper equal the CLI', r.output_text === expected.text && f.output_text === expected.text &&
    deltas === expected.text && r.status === 'incomplete' && r.incomplete_details?.reason === 'max_output_tokens' &&
    r.usage?.output_tokens === 12 && f.usage?.output_tokens === 12,
    `${JSON.stringify(r.output_text)} / ${JSON.stringify(f.output_text)} vs ${JSON.stringify(expected.text)}`);
});

await check('responses: retrieve, list the next turn\'s input items and delete a kept response', async () => {
  const r = await client.responses.create({ model: 'x', input: 'What is the capital of France?', max_output_tokens: 6 });
  log.push(`> client.responses.retrieve(${JSON.stringify(r.id)})`);
  const g = await client.responses.retrieve(r.id);
  log.push(`< ${JSON.stringify(g)}`);
  // the next turn's input items, a page an item: the SDK follows has_more / after by itself
  const r2 = await client.responses.create({ model: 'x', input: 'And of Italy?', previous_response_id: r.id, max_output_tokens: 2 });
  const items = [];
  for await (const it of client.responses.inputItems.list(r2.id, { limit: 1, order: 'asc' })) items.push(it);
  log.push(`< (input items) ${JSON.stringify(items)}`);
  const itemsOk = items.length === 3 && items[0].role === 'user' && items[0].content[0].text === 'What is the capital of France?' &&
    items[1].id === r.output[0].id && items[1].content[0].text === r.output_text && items[2].content[0].text === 'And of Italy?';
  await client.responses.delete(r.id);
  let gone = null;
  try {
    await client.responses.retrieve(r.id);
  } catch (e) {
    gone = e;
  }
  report('responses: retrieve, list the next turn\'s input items and delete a kept response', g.id === r.id &&
    g.output_text === r.output_text && JSON.stringify(g.output) === JSON.stringify(r.output) && itemsOk &&
    gone instanceof OpenAI.NotFoundError, `${JSON.stringify(g).slice(0, 200)}; items ${JSON.stringify(items).slice(0, 300)}; after delete: ${gone}`);
});

await check('responses: a forced function call, streamed and not', async () => {
  const req = {
    model: 'x',
    input: 'What is the weather in Paris?',
    tools: [{
      type: 'function',
      name: 'get_weather',
      description: 'Weather of a city',
      parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 12 }, unit: { enum: ['c', 'f'] } }, required: ['city', 'unit'] },
      strict: true,
    }],
    tool_choice: 'required',
    parallel_tool_calls: false,
    max_output_tokens: 300,
  };
  log.push(`> client.responses.create(${JSON.stringify(req)})`);
  const r = await client.responses.create(req);
  log.push(`< ${JSON.stringify(r)}`);
  const stream = client.responses.stream(req);
  let args = '';
  stream.on('response.function_call_arguments.delta', (e) => { args += e.delta; });
  const f = await stream.finalResponse();
  log.push(`< (stream) ${JSON.stringify(f.output)}`);
  const a = r.output.find((o) => o.type === 'function_call'), b = f.output.find((o) => o.type === 'function_call');
  const parsed = a ? JSON.parse(a.arguments) : null;
  report('responses: a forced function call, streamed and not', a && b && a.name === 'get_weather' && b.name === a.name &&
    b.arguments === a.arguments && args === a.arguments && typeof parsed.city === 'string' && ['c', 'f'].includes(parsed.unit) &&
    r.status === 'completed' && f.status === 'completed',
    JSON.stringify([r.output, f.output]).slice(0, 300));
});

if (transcriptPath) fs.writeFileSync(transcriptPath, log.join('\n') + '\n');
process.exit(failed ? 1 : 0);
