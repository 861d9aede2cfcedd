// npm `openai`: the calls of the clients tier's workload, plus embeddings (base64 by default).
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.env.BASE, maxRetries: 0 });
const model = process.env.MODEL;
const ask = [{ role: "user", content: "Say hi" }];
const out = {};
out.models = (await client.models.list()).data.map((m) => m.id);
out.chat = (await client.chat.completions.create({ model, messages: ask })).choices[0].message.content;
out.chatChunks = 0;
const chunks = await client.chat.completions.create({
  model, messages: ask, stream: true, stream_options: { include_usage: true },
});
for await (const _ of chunks) out.chatChunks += 1;
out.responses = (await client.responses.create({ model, input: "Say hi" })).output_text;
out.responseEvents = [];
for await (const ev of await client.responses.create({ model, input: "Say hi", stream: true })) {
  out.responseEvents.push(ev.type);
}
try {
  const e = await client.embeddings.create({ model: "text-embedding-3-small", input: "Say hi" });
  out.embedding = e.data[0].embedding.length;
} catch (e) {
  out.embedding = e.status ?? String(e);
}
console.log(JSON.stringify(out));
